// How the transformer cuts a unit's gradient into pieces of at most the
// engine's bucket size (UnitAccess::GradPieceCapacity), and the writer that
// begins and ends those pieces as backward reaches each tensor.
//
// A unit's backward is a sequence of "ops", each writing one contiguous
// range of the unit's parameters at once (a weight and its bias, a norm's
// weight and bias). An op is never split. A piece is a run of consecutive
// ops (in backward order) that together cover one contiguous range within
// the capacity, the longest such run from its first op; so each piece is
// complete as soon as backward moves past its last op, and at most one
// piece of the unit is open at a time. When the capacity holds the whole
// unit, the unit is one piece (the engine's buckets default to the largest
// unit).
//
// Thread safety: one backward at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/trainable.h"
#include "tierflow/status.h"

namespace tierflow::model_internal {

// One op's parameters: a weight and an optional bias (-1), unit offsets.
struct GradOp {
  int64_t w = -1, w_count = 0;
  int64_t b = -1, b_count = 0;
  int64_t begin() const { return w; }
  int64_t end() const { return b >= 0 ? b + b_count : w + w_count; }
};

struct GradPiece {
  int64_t begin = 0, end = 0;        // unit parameters [begin, end)
  size_t first_op = 0, last_op = 0;  // ops [first_op, last_op] of the plan
};

// The pieces of one unit for `ops` (backward order). Errors: InvalidArgument
// when an op's weight and bias are not adjacent, when an op is larger than
// the capacity (naming `unit_name`, the op's size and the capacity), or when
// the ops do not cover [0, unit_params) exactly once.
StatusOr<std::vector<GradPiece>> PlanGradPieces(const std::string& unit_name, int64_t unit_params,
                                                const std::vector<GradOp>& ops, uint64_t capacity);

// Walks one unit's ops in plan order during backward.
class GradPieceWriter {
 public:
  // `ops` and `pieces` (from PlanGradPieces over the same ops) must outlive the writer.
  GradPieceWriter(UnitAccess& access, int unit, const std::vector<GradOp>& ops,
                  const std::vector<GradPiece>& pieces)
      : access_(access), unit_(unit), ops_(ops), pieces_(pieces) {}
  struct Grads {
    float* w = nullptr;
    float* b = nullptr;  // null when the op has no bias
  };
  // Before the kernels of the op whose weight is at unit offset `w`, which
  // must be the plan's next op: ends the previous piece when this op starts
  // a new one, begins this op's piece, and returns where the op's gradients go.
  StatusOr<Grads> Op(int64_t w);
  // After the unit's last op: ends the last piece. Errors if ops are left.
  Status Finish();

 private:
  UnitAccess& access_;
  int unit_;
  const std::vector<GradOp>& ops_;
  const std::vector<GradPiece>& pieces_;
  size_t next_op_ = 0;
  size_t piece_ = 0;
  float* base_ = nullptr;  // the open piece's buffer (its first parameter), or null
};

}  // namespace tierflow::model_internal

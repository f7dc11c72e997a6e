// Gradient pieces: the greedy plan and the writer that follows it.
#include "model/grad_pieces.h"

#include <algorithm>

namespace tierflow::model_internal {

StatusOr<std::vector<GradPiece>> PlanGradPieces(const std::string& unit_name, int64_t unit_params,
                                                const std::vector<GradOp>& ops, uint64_t capacity) {
  if (capacity == 0) return InvalidArgumentError("gradient pieces: capacity 0");
  const auto cap = static_cast<int64_t>(std::min<uint64_t>(capacity, INT64_MAX));
  int64_t covered = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const GradOp& op = ops[i];
    if (op.w < 0 || op.w_count <= 0 || (op.b >= 0 && op.b != op.w + op.w_count) ||
        op.end() > unit_params) {
      return InvalidArgumentError("gradient pieces of '" + unit_name + "': op " +
                                  std::to_string(i) + " (weight at " + std::to_string(op.w) +
                                  ") is not one contiguous range of the unit");
    }
    const int64_t n = op.end() - op.begin();
    if (n > cap) {
      return InvalidArgumentError(
          "'" + unit_name + "' has a tensor whose gradient (" + std::to_string(n) +
          " parameters, written by one kernel) exceeds the gradient buckets' " +
          std::to_string(capacity) + " parameters: use larger buckets");
    }
    covered += n;
  }
  // Each piece: from its first op, the longest run of ops whose span fits
  // the capacity and which exactly covers that span (so it holds no
  // parameter another piece writes).
  std::vector<GradPiece> pieces;
  for (size_t i = 0; i < ops.size();) {
    GradPiece best{ops[i].begin(), ops[i].end(), i, i};
    int64_t lo = ops[i].begin(), hi = ops[i].end(), sum = hi - lo;
    for (size_t j = i + 1; j < ops.size(); ++j) {
      lo = std::min(lo, ops[j].begin());
      hi = std::max(hi, ops[j].end());
      sum += ops[j].end() - ops[j].begin();
      if (hi - lo > cap) break;
      if (sum == hi - lo) best = GradPiece{lo, hi, i, j};
    }
    pieces.push_back(best);
    i = best.last_op + 1;
  }
  // Coverage: the ops' total equals the unit and no two ops overlap.
  std::vector<GradOp> sorted = ops;
  std::sort(sorted.begin(), sorted.end(),
            [](const GradOp& a, const GradOp& b) { return a.begin() < b.begin(); });
  int64_t at = 0;
  for (const GradOp& op : sorted) {
    if (op.begin() != at) break;
    at = op.end();
  }
  if (covered != unit_params || at != unit_params) {
    return InvalidArgumentError("gradient pieces of '" + unit_name + "': its ops cover " +
                                std::to_string(covered) + " parameters, not each of its " +
                                std::to_string(unit_params) + " once");
  }
  return pieces;
}

StatusOr<GradPieceWriter::Grads> GradPieceWriter::Op(int64_t w) {
  if (next_op_ >= ops_.size() || ops_[next_op_].w != w) {
    return InternalError("gradient pieces: backward wrote the tensor at " + std::to_string(w) +
                         " out of the planned order");
  }
  const size_t i = next_op_++;
  while (pieces_[piece_].last_op < i) {
    if (base_ != nullptr) TF_RETURN_IF_ERROR(access_.EndGrads(unit_));
    base_ = nullptr;
    ++piece_;
  }
  const GradPiece& p = pieces_[piece_];
  if (base_ == nullptr) {
    TF_ASSIGN_OR_RETURN(base_, access_.BeginGrads(unit_, static_cast<uint64_t>(p.begin),
                                                  static_cast<uint64_t>(p.end - p.begin)));
  }
  const GradOp& op = ops_[i];
  Grads g;
  g.w = base_ + (op.w - p.begin);
  if (op.b >= 0) g.b = base_ + (op.b - p.begin);
  return g;
}

Status GradPieceWriter::Finish() {
  if (next_op_ != ops_.size()) {
    return InternalError("gradient pieces: backward wrote " + std::to_string(next_op_) + " of " +
                         std::to_string(ops_.size()) + " planned tensors");
  }
  if (base_ != nullptr) TF_RETURN_IF_ERROR(access_.EndGrads(unit_));
  base_ = nullptr;
  return Status::Ok();
}

}  // namespace tierflow::model_internal

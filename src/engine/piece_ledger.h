// The piece ledger: the model's gradient pieces of the micro-batch being
// issued, checked against UnitAccess's contract as they come (trainable.h):
// in a micro-batch a unit's pieces lie inside it, are at most a bucket,
// are disjoint and cover it, and at most one per unit is open at a time.
//
// Thread ownership: the compute thread's (BeginGrads, EndGrads and the
// check after each micro-batch); the worker never sees it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/trainable.h"
#include "tierflow/status.h"

namespace tierflow {

class PieceLedger {
 public:
  // A unit's open piece: in bucket `bucket` (-1: none open).
  struct Piece {
    int bucket = -1;
    uint64_t begin = 0, count = 0;
  };
  // `units` must outlive the ledger; pieces hold at most `bucket_params`.
  PieceLedger(const std::vector<UnitInfo>& units, uint64_t bucket_params, int buckets);

  // A new micro-batch: no pieces yet.
  void BeginMicroBatch();
  // Whether piece [begin, +count) of `unit` may be begun. Errors name the
  // unit and the range: InvalidArgument outside the unit, above a bucket or
  // overlapping an earlier piece; Internal while its previous piece is open;
  // FailedPrecondition when every bucket is held by open pieces (waiting
  // for one would never end).
  Status CheckBegin(int unit, uint64_t begin, uint64_t count) const;
  // The piece was begun in `bucket`. REQUIRES: CheckBegin was Ok.
  void Open(int unit, int bucket, uint64_t begin, uint64_t count);
  // Ends unit's open piece and returns it. Errors: InvalidArgument for no
  // such unit or no open piece.
  StatusOr<Piece> Close(int unit);
  // After a micro-batch: no piece open, and every unit covered.
  Status CheckComplete() const;

 private:
  const std::vector<UnitInfo>& units_;
  uint64_t bucket_params_;
  int buckets_;
  std::vector<Piece> open_;  // per unit
  // Per unit, the pieces begun in this micro-batch, as (begin, count).
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> pieces_;
};

}  // namespace tierflow

// The piece ledger: UnitAccess's gradient-piece contract, checked as it happens.
#include "engine/piece_ledger.h"

#include <string>

namespace tierflow {

PieceLedger::PieceLedger(const std::vector<UnitInfo>& units, uint64_t bucket_params, int buckets)
    : units_(units),
      bucket_params_(bucket_params),
      buckets_(buckets),
      open_(units.size()),
      pieces_(units.size()) {}

void PieceLedger::BeginMicroBatch() {
  for (auto& pieces : pieces_) pieces.clear();
}

Status PieceLedger::CheckBegin(int unit, uint64_t begin, uint64_t count) const {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) {
    return InvalidArgumentError("BeginGrads: no unit " + std::to_string(unit));
  }
  const UnitInfo& u = units_[unit];
  if (count == 0 || begin > u.num_params || count > u.num_params - begin) {
    return InvalidArgumentError("BeginGrads(" + u.name + "): parameters [" + std::to_string(begin) +
                                ", +" + std::to_string(count) +
                                ") are not a non-empty range of its " +
                                std::to_string(u.num_params));
  }
  if (count > bucket_params_) {
    return InvalidArgumentError("BeginGrads(" + u.name + "): a piece of " + std::to_string(count) +
                                " parameters exceeds the gradient buckets' " +
                                std::to_string(bucket_params_) + " (GradPieceCapacity)");
  }
  if (open_[unit].bucket >= 0) {
    return InternalError("BeginGrads(" + u.name + ") while its previous piece is open");
  }
  for (const auto& [b0, n0] : pieces_[unit]) {
    if (begin < b0 + n0 && b0 < begin + count) {
      return InvalidArgumentError("BeginGrads(" + u.name + "): parameters [" +
                                  std::to_string(begin) + ", +" + std::to_string(count) +
                                  ") overlap an earlier piece [" + std::to_string(b0) + ", +" +
                                  std::to_string(n0) + ") of this micro-batch");
    }
  }
  // Buckets held by open pieces are only freed by the model: if they are
  // all held, waiting for one would never end.
  int open = 0;
  for (const Piece& p : open_) open += p.bucket >= 0 ? 1 : 0;
  if (open >= buckets_) {
    return FailedPreconditionError("BeginGrads(" + u.name + "): all " + std::to_string(buckets_) +
                                   " gradient buckets are held by open pieces; the model needs "
                                   "more buckets (EngineOptions::grad_buckets)");
  }
  return Status::Ok();
}

void PieceLedger::Open(int unit, int bucket, uint64_t begin, uint64_t count) {
  open_[unit] = Piece{bucket, begin, count};
  pieces_[unit].emplace_back(begin, count);
}

StatusOr<PieceLedger::Piece> PieceLedger::Close(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size() || open_[unit].bucket < 0) {
    return InvalidArgumentError("EndGrads without BeginGrads for unit " + std::to_string(unit));
  }
  const Piece piece = open_[unit];
  open_[unit] = Piece{};
  return piece;
}

Status PieceLedger::CheckComplete() const {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (open_[u].bucket >= 0) {
      return InternalError("the model left a gradient piece of '" + units_[u].name +
                           "' open (BeginGrads without EndGrads)");
    }
    uint64_t covered = 0;
    for (const auto& piece : pieces_[u]) covered += piece.second;
    if (covered != units_[u].num_params) {
      return InternalError("the model delivered gradients for " + std::to_string(covered) +
                           " of the " + std::to_string(units_[u].num_params) + " parameters of '" +
                           units_[u].name + "' in a micro-batch");
    }
  }
  return Status::Ok();
}

}  // namespace tierflow

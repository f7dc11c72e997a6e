// A unit's gradient statistics assembled from its sub-groups.
#include "engine/unit_chunk_sums.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace tierflow {

void UnitChunkSums::Reset(uint64_t unit_params) {
  unit_params_ = unit_params;
  added_ = 0;
  partials_.assign(GradStatsChunks(unit_params), 0.0);
  edges_.clear();
}

uint64_t UnitChunkSums::ChunkLength(uint64_t c) const {
  return std::min<uint64_t>(kGradStatsChunkElems, unit_params_ - c * kGradStatsChunkElems);
}

Status UnitChunkSums::Add(uint64_t begin, const float* values, uint64_t n) {
  if (begin > unit_params_ || n > unit_params_ - begin || added_ + n > unit_params_) {
    return InternalError("gradient statistics: elements [" + std::to_string(begin) + ", +" +
                         std::to_string(n) + ") of a unit of " + std::to_string(unit_params_) +
                         " added twice or out of range");
  }
  const uint64_t end = begin + n;
  constexpr uint64_t kC = kGradStatsChunkElems;
  uint64_t pos = begin;
  while (pos < end) {
    const uint64_t c = pos / kC;
    const uint64_t chunk_begin = c * kC, chunk_end = chunk_begin + ChunkLength(c);
    if (pos == chunk_begin && end >= chunk_end) {
      // Whole chunks from here: one call gives each its partial.
      const uint64_t whole_end = std::min(end, unit_params_) / kC * kC;
      const uint64_t upto = end >= unit_params_ ? unit_params_ : whole_end;
      TF_RETURN_IF_ERROR(
          GradChunkSquares(values + (pos - begin), DType::kF32, upto - pos, partials_.data() + c));
      pos = upto;
      continue;
    }
    // Part of a chunk shared with a neighbouring sub-group: keep it until whole.
    const uint64_t take = std::min(end, chunk_end) - pos;
    Edge& edge = edges_[c];
    if (edge.values.empty()) edge.values.resize(ChunkLength(c));
    std::memcpy(edge.values.data() + (pos - chunk_begin), values + (pos - begin), take * 4);
    edge.filled += take;
    if (edge.filled == edge.values.size()) {
      TF_RETURN_IF_ERROR(GradChunkSquares(edge.values.data(), DType::kF32, edge.values.size(),
                                          partials_.data() + c));
      edges_.erase(c);
    }
    pos += take;
  }
  added_ += n;
  return Status::Ok();
}

GradStatsResult UnitChunkSums::Result() const {
  // GradStats' sum: the partials from 0.0 in chunk order; a non-finite
  // chunk's partial is NaN, and so is the sum.
  GradStatsResult r;
  for (double p : partials_) {
    r.sum_squares += p;
    r.has_non_finite |= std::isnan(p);
  }
  if (r.has_non_finite) r.sum_squares = std::nan("");
  return r;
}

}  // namespace tierflow

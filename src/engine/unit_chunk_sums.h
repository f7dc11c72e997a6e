// A unit's gradient statistics from its sub-groups, one at a time and in any
// order: the same bits as GradStats (common/grad_stats.h) over the whole
// unit. GradStats sums fixed chunks of kGradStatsChunkElems counted from the
// unit's start and adds their partials in chunk order; a sub-group's edges
// need not fall on those chunks, so a chunk it shares with a neighbour waits
// here (at most one chunk per edge) until every element of it is in.
//
// For gradients that are never whole in host memory (EngineOptions::
// grad_offload kNvme): the final micro-batch's fp32 sums pass through a
// bounded set of slots, and the clip decision needs each unit's norm with the
// bits the host accumulator gives.
//
// Thread safety: none; the optimizer worker alone uses it.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "common/grad_stats.h"
#include "tierflow/status.h"

namespace tierflow {

class UnitChunkSums {
 public:
  // A unit of `unit_params` parameters; nothing added yet.
  void Reset(uint64_t unit_params);
  // Elements [begin, begin + n) of the unit, fp32. Each element is added once.
  Status Add(uint64_t begin, const float* values, uint64_t n);
  // Whether every element has been added.
  bool complete() const { return added_ == unit_params_; }
  // GradStats' result over the unit. REQUIRES: complete().
  GradStatsResult Result() const;

 private:
  struct Edge {
    std::vector<float> values;  // the chunk's elements
    uint64_t filled = 0;
  };
  uint64_t ChunkLength(uint64_t c) const;

  uint64_t unit_params_ = 0, added_ = 0;
  std::vector<double> partials_;  // per chunk
  std::map<uint64_t, Edge> edges_;
};

}  // namespace tierflow

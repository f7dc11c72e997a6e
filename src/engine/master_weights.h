// Reading a trained model's state out of an OffloadEngine: all fp32 master
// weights at once (GatherMasterWeights, for tests and small models), or any
// range of a unit's master weights or moments through one sub-group at a
// time (StateRangeReader, for streaming saves: a checkpoint of an 8B model
// must not hold its 32 GB of masters in RAM beside the optimizer state).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/offload_engine.h"
#include "tierflow/status.h"

namespace tierflow {

// (layout().total_params,) fp32 masters. Calls Finish() first so the last
// step's updates are in. REQUIRES: no Step in flight (called from the thread
// that drives the engine). Errors: those of Finish and ReadState.
StatusOr<std::vector<float>> GatherMasterWeights(OffloadEngine& engine);

class StateRangeReader {
 public:
  enum class Array { kMaster, kExpAvg, kExpAvgSq };
  // REQUIRES: the engine is idle (after Finish) while the reader is used.
  explicit StateRangeReader(OffloadEngine& engine) : engine_(engine) {}
  // Copies `count` values of `array` of unit `unit`, from unit offset
  // `offset`, to `out`. Reads each sub-group it touches whole (the tiers
  // read whole sub-groups) and keeps the last one, so reading a unit front
  // to back reads each sub-group once per array. Errors: InvalidArgument
  // for a range outside the unit; those of ReadState.
  Status Read(int unit, Array array, uint64_t offset, uint64_t count, float* out);
  // Host bytes it holds: one sub-group's three arrays (the planner counts them).
  uint64_t buffer_bytes() const { return 3 * master_.capacity() * sizeof(float); }

 private:
  OffloadEngine& engine_;
  int cached_group_ = -1;
  std::vector<float> master_, exp_avg_, exp_avg_sq_;
};

}  // namespace tierflow

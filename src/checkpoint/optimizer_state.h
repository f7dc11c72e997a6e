// A checkpoint's optimizer state (fp32 master weights and Adam moments), in
// either layout: one safetensors file per unit under optimizer/ ("host"), or
// a kept swap set on NVMe ("nvme", after `tierflow tier migrate --to nvme`)
// whose tensors are "<unit>/master", "<unit>/exp_avg", "<unit>/exp_avg_sq".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/trainer_state.h"
#include "common/path_component.h"
#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow {

// The optimizer state of a checkpoint in either layout, read one unit at a
// time (memory holds what the caller asks for). Does not verify the whole
// checkpoint; every read checks what it reads (safetensors structure, swap
// block CRC32Cs). Not thread-safe.
class CheckpointOptimizerState {
 public:
  struct Unit {
    PathComponent name;  // validated: it names the unit's file
    uint64_t num_params = 0;
  };
  // Errors: those of ReadCheckpointState; DataLoss when the layout fields
  // are malformed, the swap set cannot be opened, a unit name is not a
  // PathComponent or appears twice, a unit's state is a symlink or missing, or
  // num_params is more than the unit's file (host) or swap tensors (nvme)
  // hold — so callers may allocate units()[u].num_params floats per array.
  // Memory: nothing per parameter.
  static StatusOr<std::unique_ptr<CheckpointOptimizerState>> Open(
      const std::string& checkpoint_dir);
  virtual ~CheckpointOptimizerState() = default;
  OffloadPlacement layout() const { return layout_; }              // kHost or kNvme
  const CheckpointSwapSet& swap_set() const { return swap_set_; }  // nvme only
  const std::vector<Unit>& units() const { return units_; }
  const nlohmann::json& state() const { return state_; }
  int64_t step() const { return step_; }  // trainer_state.json "step", validated
  // Reads unit `u`'s three fp32 arrays (units()[u].num_params floats each).
  // Errors name the file (and for swap files the tensor and byte range).
  Status ReadUnit(size_t u, float* master, float* exp_avg, float* exp_avg_sq) const {
    return ReadUnitRange(u, 0, units_.at(u).num_params, master, exp_avg, exp_avg_sq);
  }
  // The same for parameters [offset, offset + count) of the unit (`count`
  // floats each), so a resume holds one sub-group, not a unit (an 8B
  // model's LM head is 6 GB of state). Errors: InvalidArgument for a range
  // outside the unit; as ReadUnit.
  Status ReadUnitRange(size_t u, uint64_t offset, uint64_t count, float* master, float* exp_avg,
                       float* exp_avg_sq) const;

 protected:
  // Reads parameters [offset, offset + count) of `array` ("master",
  // "exp_avg" or "exp_avg_sq") of unit `u`, a range inside the unit, into
  // `out`: the layout's part of ReadUnitRange.
  virtual Status ReadArrayRange(size_t u, const char* array, uint64_t offset, uint64_t count,
                                float* out) const = 0;

  std::string dir_;
  OffloadPlacement layout_ = OffloadPlacement::kHost;
  CheckpointSwapSet swap_set_;
  std::vector<Unit> units_;
  nlohmann::json state_;
  int64_t step_ = 0;
};

// The relative path of unit `unit`'s host-layout file ("optimizer/<unit>.safetensors").
std::string OptimizerUnitFileName(const PathComponent& unit);
// The swap-set tensor name of `array` ("master", ...) of `unit`: "<unit>/<array>".
std::string OptimizerSwapTensorName(const std::string& unit, const std::string& array);

}  // namespace tierflow

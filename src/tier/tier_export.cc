// `tierflow tier export`.
#include "tier/tier_export.h"

#include <vector>

#include "io/safetensors_writer.h"
#include "train/checkpoint.h"

namespace tierflow::tier {

StatusOr<ExportResult> ExportCheckpoint(const std::string& checkpoint_dir,
                                        const std::string& out_file) {
  TF_ASSIGN_OR_RETURN(auto state, CheckpointOptimizerState::Open(checkpoint_dir));
  ExportResult result;
  result.layout = state->layout();
  std::vector<std::vector<float>> arrays;
  arrays.reserve(state->units().size() * 3);
  std::vector<SafetensorsEntry> entries;
  for (size_t u = 0; u < state->units().size(); ++u) {
    const auto& unit = state->units()[u];
    const int64_t n = static_cast<int64_t>(unit.num_params);
    for (int a = 0; a < 3; ++a) arrays.emplace_back(unit.num_params);
    float* m = arrays[arrays.size() - 3].data();
    float* v1 = arrays[arrays.size() - 2].data();
    float* v2 = arrays[arrays.size() - 1].data();
    TF_RETURN_IF_ERROR(state->ReadUnit(u, m, v1, v2));
    entries.push_back({OptimizerSwapTensorName(unit.name, "master"), DType::kF32, {n}, m});
    entries.push_back({OptimizerSwapTensorName(unit.name, "exp_avg"), DType::kF32, {n}, v1});
    entries.push_back({OptimizerSwapTensorName(unit.name, "exp_avg_sq"), DType::kF32, {n}, v2});
    result.num_bytes += 3 * unit.num_params * 4;
  }
  result.num_tensors = entries.size();
  TF_RETURN_IF_ERROR(WriteSafetensors(
      out_file, entries,
      {{"format", "tierflow.optimizer_state"},
       {"step", std::to_string(state->state().value("step", int64_t{0}))},
       {"optimizer_step", std::to_string(state->state().value("optimizer_step", int64_t{0}))},
       {"source", checkpoint_dir}}));
  return result;
}

}  // namespace tierflow::tier

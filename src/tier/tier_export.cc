// `tierflow tier export`.
#include "tier/tier_export.h"

#include <vector>

#include "checkpoint/optimizer_state.h"
#include "common/cancel.h"
#include "io/json_util.h"
#include "io/output_path.h"
#include "io/safetensors_writer.h"

namespace tierflow::tier {

StatusOr<ExportResult> ExportCheckpoint(const std::string& checkpoint_dir,
                                        const std::string& out_file) {
  // Never into what it reads (the checkpoint, its swap set), and the output
  // checked before the state is read, not after (io/output_path.h). The
  // containment checks go first: CheckOutputFile creates a probe beside it.
  TF_RETURN_IF_ERROR(
      CheckNotInside(out_file, "tier export --out", checkpoint_dir, "the checkpoint"));
  // Open validates the unit names and bounds num_params by the checkpoint's
  // files, so the allocations below are no larger than the state on disk.
  TF_ASSIGN_OR_RETURN(auto state, CheckpointOptimizerState::Open(checkpoint_dir));
  for (const std::string& dir : state->swap_set().directories) {
    TF_RETURN_IF_ERROR(
        CheckNotInside(out_file, "tier export --out", dir, "the checkpoint's swap directory"));
  }
  TF_RETURN_IF_ERROR(CheckOutputFile(out_file, OutputWrite::kReplace, "tier export --out"));
  int64_t optimizer_step = 0;
  TF_RETURN_IF_ERROR(GetJsonInt64(state->state(), "optimizer_step",
                                  checkpoint_dir + "/trainer_state.json", &optimizer_step,
                                  JsonField::kOptional));
  ExportResult result;
  result.layout = state->layout();
  std::vector<std::vector<float>> arrays;
  arrays.reserve(state->units().size() * 3);
  std::vector<SafetensorsEntry> entries;
  for (size_t u = 0; u < state->units().size(); ++u) {
    TF_RETURN_IF_ERROR(CheckCancel("exporting " + checkpoint_dir));
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
  TF_RETURN_IF_ERROR(WriteSafetensors(out_file, entries,
                                      {{"format", "tierflow.optimizer_state"},
                                       {"step", std::to_string(state->step())},
                                       {"optimizer_step", std::to_string(optimizer_step)},
                                       {"source", checkpoint_dir}}));
  return result;
}

}  // namespace tierflow::tier

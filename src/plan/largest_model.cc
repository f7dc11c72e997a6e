// LargestFittingModel: how big a model of the same family this hardware can
// fine-tune with the same setup. Two searches, the larger answer wins: the
// family's published presets, and the input model's width at any depth
// (every tier's use grows with depth, so feasibility is monotone in the
// number of layers and a binary search finds the deepest that fits).
#include <algorithm>
#include <string>

#include "plan/planner.h"

namespace tierflow {
namespace {

constexpr int64_t kMaxSearchLayers = 1 << 20;

StatusOr<bool> Fits(const PlanInput& input, const Hardware& hw) {
  TF_ASSIGN_OR_RETURN(Plan plan, ComputePlan(input, hw));
  return plan.feasible;
}

}  // namespace

StatusOr<LargestModel> LargestFittingModel(const PlanInput& input, const Hardware& hw) {
  LargestModel best;
  for (const ModelConfig& preset : FamilyPresetLadder(input.model.family)) {
    PlanInput candidate = input;
    candidate.model = preset;
    candidate.seq_len = std::min(input.seq_len, preset.max_seq_len);
    TF_ASSIGN_OR_RETURN(bool fits, Fits(candidate, hw));
    const int64_t params = ParameterCount(preset);
    if (fits && params > best.params) {
      best.params = params;
      best.description = preset.name + " (preset)";
    }
  }

  PlanInput deep = input;
  deep.model.n_layers = 1;
  TF_ASSIGN_OR_RETURN(bool one_fits, Fits(deep, hw));
  if (one_fits) {
    // Invariant: `lo` layers fit, `hi` layers do not (or hi is the cap).
    int64_t lo = 1, hi = 2;
    while (hi <= kMaxSearchLayers) {
      deep.model.n_layers = hi;
      TF_ASSIGN_OR_RETURN(bool fits, Fits(deep, hw));
      if (!fits) break;
      lo = hi;
      hi *= 2;
    }
    hi = std::min(hi, kMaxSearchLayers + 1);
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      deep.model.n_layers = mid;
      TF_ASSIGN_OR_RETURN(bool fits, Fits(deep, hw));
      (fits ? lo : hi) = mid;
    }
    deep.model.n_layers = lo;
    const int64_t params = ParameterCount(deep.model);
    if (params > best.params) {
      best.params = params;
      best.description = input.model.name + " width (d_model " +
                         std::to_string(input.model.d_model) + ") with " + std::to_string(lo) +
                         " layers";
    }
  }
  return best;
}

}  // namespace tierflow

// What fits: LargestFittingModel, how big a model of the same family this
// hardware can fine-tune with the same setup, searched over realistic
// shapes: the family's presets and the input model, each at its own width
// and at every depth a real model of that width might have; and
// LongestFittingContext, the longest sequence, by bisection.
#include <algorithm>
#include <string>

#include "common/cancel.h"
#include "plan/planner.h"

namespace tierflow {
namespace {

StatusOr<bool> Fits(const PlanInput& input, const Hardware& hw, int64_t layers) {
  PlanInput candidate = input;
  candidate.model.n_layers = layers;
  TF_ASSIGN_OR_RETURN(Plan plan, ComputePlan(candidate, hw));
  return plan.feasible;
}

}  // namespace

StatusOr<int64_t> DeepestFittingLayers(const PlanInput& input, const Hardware& hw,
                                       int64_t max_layers) {
  if (max_layers < 1) return InvalidArgumentError("max_layers must be at least 1");
  // Deeper is not a model ValidateModelConfig accepts (and ComputePlan refuses it).
  max_layers = std::min(max_layers, kMaxModelLayers);
  TF_ASSIGN_OR_RETURN(bool one_fits, Fits(input, hw, 1));
  if (!one_fits) return int64_t{0};
  // Invariant: `lo` layers fit; `hi` layers do not, or hi = max_layers + 1.
  int64_t lo = 1, hi = max_layers + 1;
  while (hi - lo > 1) {
    TF_RETURN_IF_ERROR(CheckCancel("planning: searching for the deepest model that fits"));
    const int64_t mid = lo + (hi - lo) / 2;
    TF_ASSIGN_OR_RETURN(bool fits, Fits(input, hw, mid));
    (fits ? lo : hi) = mid;
  }
  return lo;
}

StatusOr<LargestModel> LargestFittingModel(const PlanInput& input, const Hardware& hw) {
  std::vector<ModelConfig> candidates = FamilyPresetLadder(input.model.family);
  bool input_is_preset = false;
  for (const ModelConfig& c : candidates) input_is_preset |= c.name == input.model.name;
  if (!input_is_preset) candidates.push_back(input.model);

  LargestModel best;
  for (const ModelConfig& shape : candidates) {
    TF_RETURN_IF_ERROR(CheckCancel("planning: searching for the largest model that fits"));
    PlanInput candidate = input;
    candidate.model = shape;
    candidate.seq_len = std::min(input.seq_len, shape.max_seq_len);
    const int64_t max_layers = std::max(shape.n_layers, shape.d_model / kMinWidthPerLayer);
    TF_ASSIGN_OR_RETURN(int64_t layers, DeepestFittingLayers(candidate, hw, max_layers));
    if (layers == 0) continue;
    ModelConfig found = shape;
    found.n_layers = layers;
    const int64_t params = ParameterCount(found);
    if (params <= best.params) continue;
    best.params = params;
    best.config = found;
    best.description = layers == shape.n_layers
                           ? shape.name + " as it is"
                           : shape.name + " with " + std::to_string(layers) +
                                 " layers instead of " + std::to_string(shape.n_layers);
  }
  return best;
}

StatusOr<LongestContext> LongestFittingContext(const PlanInput& input, const Hardware& hw) {
  auto longest = [&](ActivationOffload where) -> StatusOr<int64_t> {
    PlanInput candidate = input;
    candidate.offload_activations = where;
    auto fits = [&](int64_t seq_len) -> StatusOr<bool> {
      candidate.seq_len = seq_len;
      TF_ASSIGN_OR_RETURN(Plan plan, ComputePlan(candidate, hw));
      return plan.feasible;
    };
    TF_ASSIGN_OR_RETURN(bool one_fits, fits(1));
    if (!one_fits) return int64_t{0};
    // Invariant: `lo` tokens fit; `hi` do not, or hi = the bound + 1: the
    // model's positions, or the asked length when longer.
    int64_t lo = 1, hi = std::max(input.model.max_seq_len, input.seq_len) + 1;
    while (hi - lo > 1) {
      TF_RETURN_IF_ERROR(CheckCancel("planning: searching for the longest context that fits"));
      const int64_t mid = lo + (hi - lo) / 2;
      TF_ASSIGN_OR_RETURN(bool ok, fits(mid));
      (ok ? lo : hi) = mid;
    }
    return lo;
  };
  LongestContext out;
  TF_ASSIGN_OR_RETURN(out.on_device, longest(ActivationOffload::kNone));
  if (input.checkpointing) {
    TF_ASSIGN_OR_RETURN(out.offloaded, longest(ActivationOffload::kHost));
  }
  return out;
}

}  // namespace tierflow

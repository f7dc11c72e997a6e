// Fuzz entry points for config.json and the training config.
#include <string>

#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "tierflow/model_config.h"
#if TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG
#include "train/train_config.h"
#endif

namespace tierflow::fuzz {

void FuzzModelConfig(std::string_view data) {
  StatusOr<ModelConfig> parsed = ParseModelConfigJson(data, "fuzz/config.json");
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty());
    return;
  }
  // The parser validates what it returns, and the planner then sizes the
  // model from it: the counts must be computable (no signed overflow, which
  // UBSan reports) and positive for any config the parser accepts.
  FUZZ_CHECK(ValidateModelConfig(*parsed).ok());
  FUZZ_CHECK(ParameterCount(*parsed) > 0);
  FUZZ_CHECK(LargestGroupParameterCount(*parsed) > 0);
  FUZZ_CHECK(LayerParameterCount(*parsed) > 0);
}

#if TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG
void FuzzTrainConfig(std::string_view data) {
  StatusOr<TrainConfig> parsed = ParseTrainConfig(data, "fuzz/ds_config.json", TrainConfig{});
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty());
    return;
  }
  if (!ValidateTrainConfig(*parsed).ok()) return;
  // A valid config's schedule is evaluated at every step of the run: it must
  // be finite and non-negative at the ends and in between.
  const int64_t steps = parsed->steps;
  for (int64_t step : {int64_t{1}, int64_t{2}, steps / 2 + 1, steps}) {
    if (step < 1) continue;
    const float lr = ScheduledLr(*parsed, step);
    FUZZ_CHECK(lr == lr && lr >= 0.0f);
  }
}
#endif

}  // namespace tierflow::fuzz

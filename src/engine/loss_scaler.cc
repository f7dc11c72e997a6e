// Dynamic loss scaling.
#include "engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace tierflow {

LossScaler::LossScaler(const LossScalerOptions& options, bool enabled)
    : options_(options),
      dynamic_(enabled && options.static_scale <= 0),
      scale_(!enabled ? 1.0f
                      : (options.static_scale > 0 ? options.static_scale
                                                  : std::ldexp(1.0f, options.initial_scale_power))),
      hysteresis_left_(options.hysteresis) {}

void LossScaler::Update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    good_steps_ = 0;
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;
    } else {
      scale_ = std::max(scale_ / 2.0f, options_.min_scale);
    }
    return;
  }
  ++good_steps_;
  if (options_.scale_window > 0 && good_steps_ % options_.scale_window == 0) {
    scale_ *= 2.0f;
    hysteresis_left_ = options_.hysteresis;
  }
}

void LossScaler::Restore(const State& s) {
  scale_ = s.scale;
  good_steps_ = s.good_steps;
  hysteresis_left_ = s.hysteresis_left;
}

}  // namespace tierflow

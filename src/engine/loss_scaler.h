// Dynamic loss scaling for fp16 training, with DeepSpeed's semantics (so its
// configs mean the same here): start at 2^initial_scale_power; an overflow
// uses up one unit of hysteresis, and when none is left halves the scale
// (not below min_scale); every scale_window good steps in a row double it.
// A static scale (loss_scale > 0) never changes. bf16/fp32 use scale 1.
#pragma once

#include <cstdint>

namespace tierflow {

struct LossScalerOptions {
  float static_scale = 0;        // > 0: fixed scale. Default: 0 (dynamic)
  int initial_scale_power = 16;  // Default: 16 (scale 65536)
  int scale_window = 1000;       // Default: 1000 good steps to double
  int hysteresis = 2;            // Default: 2 overflows before halving
  float min_scale = 1.0f;        // Default: 1
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options, bool enabled);
  float scale() const { return scale_; }
  // Updates the scale after a step; `overflow` = non-finite gradients seen.
  void Update(bool overflow);

  // Resumable state.
  struct State {
    float scale;
    int good_steps;
    int hysteresis_left;
  };
  State state() const { return {scale_, good_steps_, hysteresis_left_}; }
  void Restore(const State& s);

 private:
  LossScalerOptions options_;
  bool dynamic_;
  float scale_;
  int good_steps_ = 0;
  int hysteresis_left_;
};

}  // namespace tierflow

// A test model for the engine: L square linear layers with tanh between them
// and a mean-squared-error loss, on dense inputs. Forward and backward run as
// host callbacks on the compute stream (so it needs the CPU device, whose
// device memory is host memory). The same math, on plain fp32 host arrays,
// is the reference the engine is checked against.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/trainable.h"
#include "tierflow/dtype.h"

namespace tierflow::testing_util {

// Forward and backward of the stack on host fp32 weights.
//   weights[l]: (d, d) row-major, y = x W^T
//   x: (batch, d), y: (batch, d)
//   grads[l]: (d, d), accumulated with += (dloss_scale * dL/dW)
// Returns the mean loss 0.5 * sum((out - y)^2) / (batch * d).
float LinearStackForwardBackward(const std::vector<const float*>& weights, const float* x,
                                 const float* y, int batch, int d, float dloss_scale,
                                 const std::vector<float*>& grads);

class LinearStack : public Trainable {
 public:
  // `weights_dtype` must match the engine's. Initial weights are seeded.
  LinearStack(int num_layers, int d, DType weights_dtype, uint32_t seed);

  std::vector<UnitInfo> Units() const override;
  Status InitialWeights(int unit, float* out) override;
  Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                         UnitAccess& access) override;
  StatusOr<float> LastLoss() override { return last_loss_; }

  const std::vector<float>& initial(int unit) const { return initial_[unit]; }
  int d() const { return d_; }

 private:
  int num_layers_, d_;
  DType weights_dtype_;
  std::vector<std::vector<float>> initial_;
  float last_loss_ = 0;
};

}  // namespace tierflow::testing_util

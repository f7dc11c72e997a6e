// A synthetic model for benchmarks: U square linear units of d*d parameters
// whose forward and backward are real GEMMs on the device (so the compute
// stage costs what 6 * params * tokens FLOPs cost on this device), with fixed
// random activations. Its loss is meaningless (always 0); what it exercises
// is the engine's data movement at a chosen size. Runs on any device.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/trainable.h"
#include "tierflow/device.h"
#include "tierflow/dtype.h"

namespace tierflow {

class SyntheticModel : public Trainable {
 public:
  // d = floor(sqrt(params_per_unit)); each unit has d*d parameters.
  static StatusOr<std::unique_ptr<SyntheticModel>> Create(Device& device, int num_units,
                                                          uint64_t params_per_unit, int tokens,
                                                          DType dtype);

  std::vector<UnitInfo> Units() const override;
  Status InitialWeights(int unit, float* out) override;
  Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                         UnitAccess& access) override;
  StatusOr<float> LastLoss() override { return 0.0f; }

  int d() const { return d_; }
  int tokens() const { return tokens_; }

 private:
  SyntheticModel(int num_units, int d, int tokens, DType dtype)
      : num_units_(num_units), d_(d), tokens_(tokens), dtype_(dtype) {}
  int num_units_, d_, tokens_;
  DType dtype_;
  DeviceBuffer x_, y_, dy_;  // (tokens, d) each, dtype
};

}  // namespace tierflow

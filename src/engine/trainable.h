// What the OffloadEngine trains: a model cut into "units" (a layer, the
// embeddings, the head), each owning one contiguous span of parameters.
//
// The engine owns every parameter buffer; the model owns its activations.
// The model enqueues forward and backward of a micro-batch on the compute
// stream and asks the engine, through UnitAccess, for each unit's weights
// (the engine makes the stream wait until that unit's latest update has
// landed) and for a gradient buffer per unit (the engine streams it to the
// host as soon as the model says the unit's gradients are complete).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow {

struct UnitInfo {
  std::string name;     // e.g. "layers.3"; names state files and trace spans
  uint64_t num_params;  // > 0
};

// One micro-batch, host memory, owned by the caller until the step returns.
struct MicroBatch {
  const int32_t* inputs = nullptr;       // (batch, seq_len) token ids, or model-defined
  const int32_t* targets = nullptr;      // (batch, seq_len) next-token ids; ignore index allowed
  const float* dense_inputs = nullptr;   // (batch, in_features) for non-token models
  const float* dense_targets = nullptr;  // (batch, out_features)
  int batch = 0;
  int seq_len = 0;
};

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // Device pointer to unit `unit`'s working weights (dtype = the engine's
  // weights dtype). Makes the compute stream wait for the unit's latest update.
  virtual StatusOr<void*> Weights(int unit) = 0;
  // Device pointer to a zeroed fp32 gradient buffer of the unit's size.
  // Contract: the model accumulates into it with += and calls EndGrads once.
  virtual StatusOr<float*> BeginGrads(int unit) = 0;
  // Everything that writes unit `unit`'s gradients has been enqueued on the
  // compute stream; the engine streams them out from here.
  virtual Status EndGrads(int unit) = 0;
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  // Units in forward order. Must not change after the engine is created.
  virtual std::vector<UnitInfo> Units() const = 0;
  // Writes unit `unit`'s initial fp32 weights (num_params floats).
  virtual Status InitialWeights(int unit, float* out) = 0;
  // Enqueues forward and backward of one micro-batch on `compute`. The loss
  // gradient is multiplied by `dloss_scale` (loss scale / micro-batches).
  virtual Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                                 UnitAccess& access) = 0;
  // The unscaled mean loss of the last ForwardBackward.
  // REQUIRES: the compute stream has been synchronized since.
  virtual StatusOr<float> LastLoss() = 0;
};

}  // namespace tierflow

// What the OffloadEngine trains: a model cut into "units" (a layer, the
// embeddings, the head), each owning one contiguous span of parameters.
//
// The engine owns every parameter buffer; the model owns its activations.
// The model enqueues forward and backward of a micro-batch on the compute
// stream and asks the engine, through UnitAccess, for each unit's weights
// (the engine makes the stream wait until that unit's latest update has
// landed) and for gradient buffers (the engine streams each to the host as
// soon as the model says it is complete). A unit's gradients come in one or
// more pieces, contiguous parameter ranges of at most GradPieceCapacity()
// parameters (the engine's bucket size), so a unit larger than a bucket (a
// 128K x 4096 LM head) never needs its whole fp32 gradient on the device.
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
  // The sizes of the unit's tensors, in order, summing to num_params; empty:
  // the unit is one tensor. DeepSpeed's sub-group rule groups whole tensors
  // (tierflow/sub_group_rule.h).
  std::vector<uint64_t> tensor_params = {};
};

// One micro-batch, host memory, owned by the caller until the step returns.
struct MicroBatch {
  const int32_t* inputs = nullptr;       // (batch, seq_len) token ids, or model-defined
  const int32_t* targets = nullptr;      // (batch, seq_len) next-token ids; ignore index allowed
  const float* dense_inputs = nullptr;   // (batch, in_features) for non-token models
  const float* dense_targets = nullptr;  // (batch, out_features)
  int batch = 0;
  int seq_len = 0;
  // Packed samples: (batch, seq_len) each token's position within its sample
  // (0, 1, 2, ... restarting at each sample), or null: one sequence per row.
  // A token model then restarts its position encoding at each sample and
  // keeps attention within it. Model-defined; the transformer takes it for
  // RoPE models and refuses it for learned positions (GPT-2).
  const int32_t* positions = nullptr;
  // The targets the model's loss averages over (those not ignored), counted
  // by the caller; -1 = not counted. When every micro-batch of a step gives a
  // count and they sum above 0, the step's loss (and gradient) is the mean
  // over all of them together: micro-batch k weighs count_k / sum, not 1/K,
  // so a sample's tokens count the same whatever micro-batch they land in
  // (instruction data, where responses differ in length).
  int64_t loss_tokens = -1;
};

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // Device pointer to unit `unit`'s working weights (dtype = the engine's
  // weights dtype). Makes the compute stream wait for the unit's latest update
  // (and, for a streamed unit, for its upload into a device slot). The
  // pointer is valid until ReleaseWeights(unit). Calls follow the model's
  // WeightsSchedule(); a unit is taken at most once at a time.
  virtual StatusOr<void*> Weights(int unit) = 0;
  // Every kernel that reads unit `unit`'s weights since Weights(unit) has
  // been enqueued on the compute stream; a streamed unit's slot may be
  // reused once they have run.
  virtual Status ReleaseWeights(int unit) = 0;
  // The most parameters one gradient piece may hold (> 0).
  virtual uint64_t GradPieceCapacity() const = 0;
  // Device pointer to a zeroed fp32 buffer for parameters [begin, begin +
  // count) of unit `unit`. Contract: in each ForwardBackward the model's
  // pieces of a unit are disjoint and together cover it; at most one piece
  // per unit is open (begun, not ended) at a time; the model accumulates
  // into the piece with += and calls EndGrads once. Errors: InvalidArgument
  // for a range outside the unit, above the capacity or overlapping an
  // earlier piece; FailedPrecondition when every bucket is held by open
  // pieces (waiting would never end).
  virtual StatusOr<float*> BeginGrads(int unit, uint64_t begin, uint64_t count) = 0;
  // Everything that writes unit `unit`'s open piece has been enqueued on the
  // compute stream; the engine streams it out from here.
  virtual Status EndGrads(int unit) = 0;
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  // Units in forward order. Must not change after the engine is created.
  virtual std::vector<UnitInfo> Units() const = 0;
  // The units in the order one ForwardBackward takes their weights
  // (UnitAccess::Weights), a unit appearing once per take: the engine
  // uploads streamed units ahead of use in this order. Default: forward
  // order, then backward order (each unit taken twice).
  virtual std::vector<int> WeightsSchedule() const {
    const int n = static_cast<int>(Units().size());
    std::vector<int> order;
    for (int u = 0; u < n; ++u) order.push_back(u);
    for (int u = n; u-- > 0;) order.push_back(u);
    return order;
  }
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

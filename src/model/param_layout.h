// Where every parameter of a transformer lives in the engine's flat, per-unit
// buffers, and the named offsets the forward and backward read.
//
// Units follow ParameterGroups (include/tierflow/model_config.h) one to one:
// unit 0 "embeddings" (wte (V, C) [+ wpe (maxT, C) for GPT-2]), units 1..L
// "layer.i" (all of block i's tensors, contiguous, in ParameterGroups' fixed
// order), unit L+1 "head" (final norm [+ lm_head (V, C) when untied]). Inside a
// unit the tensors are packed back to back in that order, each in its Hugging
// Face storage layout: GPT-2's Conv1D weights stay (in, out) and Llama's
// nn.Linear weights (out, in); the forward picks the GEMM transpose flag per
// layout, so loading and saving are plain per-tensor copies (no transposes).
//
// Thread safety: immutable after MakeParamLayout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/trainable.h"
#include "tierflow/model_config.h"
#include "tierflow/status.h"

namespace tierflow {

// One tensor's place: unit index and element offset inside the unit.
struct TensorSlot {
  ParamTensor tensor;  // HF name (canonical, no "transformer." prefix) and stored shape
  int unit = 0;
  int64_t offset = 0;  // elements from the unit's first parameter
};

// Element offsets inside a block's unit; -1 where the family/config has no such tensor.
// GPT-2 uses qkv_w/qkv_b (c_attn, (C, 3C)), o_* (c_proj, (C, C)), fc_* (c_fc, (C, F)),
// down_* (mlp.c_proj, (F, C)), all Conv1D (in, out). Llama uses q/k/v/o, gate/up/down,
// all nn.Linear (out, in).
struct LayerOffsets {
  int64_t norm1_w = -1, norm1_b = -1;
  int64_t qkv_w = -1, qkv_b = -1;
  int64_t q_w = -1, q_b = -1, k_w = -1, k_b = -1, v_w = -1, v_b = -1;
  int64_t o_w = -1, o_b = -1;
  int64_t norm2_w = -1, norm2_b = -1;
  int64_t fc_w = -1, fc_b = -1;
  int64_t gate_w = -1, gate_b = -1, up_w = -1, up_b = -1;
  int64_t down_w = -1, down_b = -1;
};
struct EmbeddingOffsets {
  int64_t wte = -1;  // (V, C)
  int64_t wpe = -1;  // (maxT, C), GPT-2 only
};
struct HeadOffsets {
  int64_t norm_w = -1, norm_b = -1;
  int64_t lm_head = -1;  // (V, C) when untied; -1 when tied to wte (unit 0)
};

struct ParamLayout {
  ModelConfig config;
  std::vector<UnitInfo> units;                   // forward order; names from ParameterGroups
  std::vector<std::vector<TensorSlot>> tensors;  // per unit, in layout order
  std::vector<int64_t> unit_offsets;             // (units + 1) prefix sums of unit sizes
  int64_t total_params = 0;
  EmbeddingOffsets embedding;
  LayerOffsets layer;  // identical for every block
  HeadOffsets head;

  int num_layers() const { return static_cast<int>(config.n_layers); }
  int embedding_unit() const { return 0; }
  int layer_unit(int i) const { return 1 + i; }
  int head_unit() const { return 1 + num_layers(); }
  // The slot of the (canonical) tensor name, or nullptr.
  const TensorSlot* Find(std::string_view name) const;
};

// Validates the config, then lays it out. Errors: InvalidArgument from
// ValidateModelConfig; Unimplemented for a block layout the forward does not
// know (a tensor name it cannot place).
StatusOr<ParamLayout> MakeParamLayout(const ModelConfig& config);

}  // namespace tierflow

// The tierflow convention's formulas: optimizer state sizes, the default
// sub-group size, and the activation memory of one micro-batch.
#include "plan/memory_model.h"

#include <algorithm>
#include <string>

namespace tierflow {

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kLion: return "lion";
    case OptimizerKind::kSgd: return "sgd";
  }
  return "?";
}

StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  if (name == "adamw" || name == "adam") return OptimizerKind::kAdamW;
  if (name == "lion") return OptimizerKind::kLion;
  if (name == "sgd") return OptimizerKind::kSgd;
  return InvalidArgumentError("unknown optimizer '" + std::string(name) +
                              "': use adamw, lion or sgd (with momentum)");
}

int OptimizerMomentCount(OptimizerKind kind) { return kind == OptimizerKind::kAdamW ? 2 : 1; }

int64_t DefaultSubGroupParams(int64_t num_params) {
  const int64_t q = kSubGroupQuantumParams;
  int64_t s = (num_params / 32 + q - 1) / q * q;
  s = std::clamp(s, q, kMaxDefaultSubGroupParams);
  return std::max<int64_t>(1, std::min(s, num_params));
}

uint64_t ActivationBytes::peak() const {
  return inputs + stored_layers + final_norm + std::max(logits, recompute_layer + gradients);
}

int64_t LayerSavedElementsPerToken(const ModelConfig& m) {
  const int64_t qkv = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim;
  const int64_t attn_out = m.n_heads * m.head_dim;
  const int64_t mlp = (m.mlp == MlpKind::kSwiGlu ? 3 : 2) * m.d_ff;
  return 4 * m.d_model + qkv + attn_out + mlp;
}

ActivationBytes ComputeActivationBytes(const ModelConfig& m, const ActivationOptions& o) {
  const uint64_t tokens = static_cast<uint64_t>(o.micro_batch) * static_cast<uint64_t>(o.seq_len);
  const uint64_t a = DTypeSize(o.dtype);
  const uint64_t C = static_cast<uint64_t>(m.d_model);
  const uint64_t H = static_cast<uint64_t>(m.n_heads);
  const uint64_t T = static_cast<uint64_t>(o.seq_len);
  const uint64_t L = static_cast<uint64_t>(m.n_layers);

  // Attention state per token: the probabilities (H*T elements) or the fp32
  // log-sum-exp (H floats). Norm statistics: two norms per block, mean and
  // rstd (LayerNorm) or rstd (RMSNorm), counted as 2 floats each for both.
  const uint64_t attention_per_token = o.attention_saves_probabilities ? H * T * a : H * 4;
  const uint64_t norm_stats_per_token = 2 * 2 * 4;
  const uint64_t full_layer_per_token =
      static_cast<uint64_t>(LayerSavedElementsPerToken(m)) * a + attention_per_token +
      norm_stats_per_token;

  ActivationBytes out;
  out.inputs = tokens * 2 * 4;
  out.final_norm = tokens * (2 * C * a + 2 * 4);
  if (o.checkpointing) {
    out.stored_layers = L * tokens * C * a;           // each block's input only
    out.recompute_layer = tokens * full_layer_per_token;
  } else {
    out.stored_layers = L * tokens * full_layer_per_token;
    out.recompute_layer = 0;
  }
  // Backward of one block holds the residual-stream gradient coming in and
  // going out (2C) and two intermediate gradients of the widest kind: the
  // MLP hidden (F), the fused qkv, or the attention probabilities (H*T).
  const uint64_t qkv = static_cast<uint64_t>((m.n_heads + 2 * m.n_kv_heads) * m.head_dim);
  uint64_t widest = std::max<uint64_t>(static_cast<uint64_t>(m.d_ff), qkv);
  if (o.attention_saves_probabilities) widest = std::max(widest, H * T);
  out.gradients = tokens * (2 * C + 2 * widest) * a;
  const uint64_t V = static_cast<uint64_t>(m.vocab_size);
  out.logits = tokens * V * (4 + (a < 4 ? a : 0));
  return out;
}

}  // namespace tierflow

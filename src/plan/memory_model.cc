// The tierflow convention's formulas: optimizer state sizes, the
// transformer's activation arena, and the engine's sub-group layout.
#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tierflow {
namespace {

// The arena rounds every buffer up to 256 bytes.
uint64_t Buf(uint64_t num_bytes) { return (num_bytes + 255) / 256 * 256; }

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

}  // namespace

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kLion:
      return "lion";
    case OptimizerKind::kSgd:
      return "sgd";
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

uint64_t BlockActivationBytes(const ModelConfig& m, int64_t tokens, DType dtype) {
  const uint64_t N = static_cast<uint64_t>(tokens);
  const uint64_t a = DTypeSize(dtype);
  const uint64_t C = static_cast<uint64_t>(m.d_model);
  const uint64_t Q = static_cast<uint64_t>(m.n_heads * m.head_dim);
  const uint64_t KV = static_cast<uint64_t>(m.n_kv_heads * m.head_dim);
  const uint64_t F = static_cast<uint64_t>(m.d_ff);
  const bool layernorm = m.norm == NormKind::kLayerNorm;
  const uint64_t stats = (layernorm ? 2 : 1) * Buf(N * 4);  // mean (LayerNorm) and rstd
  uint64_t b = 0;
  b += Buf(N * C * a) + stats;                                // norm1 output
  b += Buf(N * (Q + 2 * KV) * a);                             // q, k, v
  b += Buf(N * Q * a);                                        // attention output
  b += Buf(N * static_cast<uint64_t>(m.n_heads) * 4);         // log-sum-exp, fp32
  b += Buf(N * C * a);                                        // residual after attention
  b += Buf(N * C * a) + stats;                                // norm2 output
  b += (m.mlp == MlpKind::kSwiGlu ? 3 : 2) * Buf(N * F * a);  // fc/gate, [up], activation
  return b;
}

ActivationBytes ComputeActivationBytes(const ModelConfig& m, const ActivationOptions& o) {
  const uint64_t N = static_cast<uint64_t>(o.micro_batch) * static_cast<uint64_t>(o.seq_len);
  const uint64_t a = DTypeSize(o.dtype);
  const uint64_t C = static_cast<uint64_t>(m.d_model);
  const uint64_t Q = static_cast<uint64_t>(m.n_heads * m.head_dim);
  const uint64_t KV = static_cast<uint64_t>(m.n_kv_heads * m.head_dim);
  const uint64_t F = static_cast<uint64_t>(m.d_ff);
  const uint64_t V = static_cast<uint64_t>(m.vocab_size);
  const uint64_t L = static_cast<uint64_t>(m.n_layers);
  const bool layernorm = m.norm == NormKind::kLayerNorm;
  const bool swiglu = m.mlp == MlpKind::kSwiGlu;

  ActivationBytes out;
  out.residual = (L + 1) * Buf(N * C * a);
  out.blocks =
      (o.checkpointing ? 1 : L) * BlockActivationBytes(m, static_cast<int64_t>(N), o.dtype);
  out.final_norm = Buf(N * C * a) + (layernorm ? 2 : 1) * Buf(N * 4);
  out.logits = Buf(N * V * a) + Buf(4) + Buf(N * 4);  // logits, loss, per-row losses
  out.inputs = 2 * Buf(N * 4);
  // dres, dln (N, C); datt (N, Q); dqkv (N, Q + 2KV); dact (N, F); SwiGLU adds dgate, dup.
  out.gradients = 2 * Buf(N * C * a) + Buf(N * Q * a) + Buf(N * (Q + 2 * KV) * a) +
                  (swiglu ? 3 : 1) * Buf(N * F * a);
  return out;
}

SubGroupSummary SummarizeSubGroups(const ModelConfig& m, int64_t sub_group_params,
                                   double nvme_ratio, uint64_t state_bytes_per_param) {
  SubGroupSummary s;
  const int64_t S = std::max<int64_t>(sub_group_params, 1);
  const int64_t embedding = EmbeddingParameterCount(m);
  const int64_t layer = LayerParameterCount(m);
  const int64_t head = HeadParameterCount(m);
  const int64_t total = embedding + m.n_layers * layer + head;
  const double r = std::clamp(nvme_ratio, 0.0, 1.0);
  const int64_t host_target =
      r > 0 ? static_cast<int64_t>(std::llround((1.0 - r) * static_cast<double>(total)))
            : total + 1;
  const uint64_t full_block_bytes =
      RoundUp(static_cast<uint64_t>(S) * state_bytes_per_param, kNvmeBlockBytes);

  // Units in forward order; blocks are identical, so the per-unit work is
  // closed-form and the loop is over units, not sub-groups.
  int64_t offset = 0;
  auto unit = [&](int64_t n) {
    if (n <= 0) return;
    const int64_t slices = (n + S - 1) / S;
    const int64_t last = n - (slices - 1) * S;
    s.num_sub_groups += slices;
    s.max_unit_params = std::max(s.max_unit_params, n);
    s.max_group_params = std::max(s.max_group_params, std::min(n, S));
    // First slice whose start is at or beyond host_target.
    int64_t first = 0;
    if (host_target > offset) first = (host_target - offset + S - 1) / S;
    if (first < slices) {
      const int64_t count = slices - first;
      const int64_t full = count - 1;  // the unit's last slice may be short
      s.nvme_sub_groups += count;
      s.nvme_params += full * S + last;
      s.max_nvme_group_params = std::max(s.max_nvme_group_params, full > 0 ? S : last);
      s.nvme_block_bytes +=
          static_cast<uint64_t>(full) * full_block_bytes +
          RoundUp(static_cast<uint64_t>(last) * state_bytes_per_param, kNvmeBlockBytes);
    }
    offset += n;
  };
  unit(embedding);
  if (host_target <= offset + m.n_layers * layer && layer > 0) {
    for (int64_t i = 0; i < m.n_layers; ++i) unit(layer);
  } else {
    // No block reaches NVMe: account for them in one go (deep searches).
    const int64_t slices = (layer + S - 1) / S;
    s.num_sub_groups += m.n_layers * slices;
    if (m.n_layers > 0) {
      s.max_unit_params = std::max(s.max_unit_params, layer);
      s.max_group_params = std::max(s.max_group_params, std::min(layer, S));
    }
    offset += m.n_layers * layer;
  }
  unit(head);
  return s;
}

}  // namespace tierflow

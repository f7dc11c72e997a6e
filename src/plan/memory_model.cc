// The tierflow convention's formulas: optimizer state sizes, the
// transformer's activation arena, and the engine's sub-group layout.
#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/checked_math.h"

namespace tierflow {
namespace {

// Every product and sum below saturates (common/checked_math.h): these are
// public functions that may see unvalidated sizes (ComputePlan bounds its
// inputs first), and a wrapped byte count could look small enough to fit.
uint64_t Mul(auto... v) { return SaturatingProduct(v...); }
uint64_t Sum(auto... v) { return SaturatingSum(v...); }
uint64_t U(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

// The arena rounds every buffer up to 256 bytes.
uint64_t Buf(uint64_t num_bytes) { return SaturatingAdd(num_bytes, uint64_t{255}) / 256 * 256; }

uint64_t RoundUp(uint64_t v, uint64_t to) { return SaturatingAdd(v, to - 1) / to * to; }

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

// One block's saved set without the MLP's hidden buffers.
uint64_t BlockNonMlpBytes(const ModelConfig& m, int64_t tokens, DType dtype) {
  const uint64_t N = U(tokens);
  const uint64_t a = DTypeSize(dtype);
  const uint64_t C = U(m.d_model);
  const uint64_t Q = Mul(U(m.n_heads), U(m.head_dim));
  const uint64_t KV = Mul(U(m.n_kv_heads), U(m.head_dim));
  const bool layernorm = m.norm == NormKind::kLayerNorm;
  const uint64_t stats = Mul(layernorm ? 2 : 1, Buf(Mul(N, 4)));  // mean (LayerNorm) and rstd
  return Sum(Buf(Mul(N, C, a)), stats,                            // norm1 output
             Buf(Mul(N, Sum(Q, Mul(2, KV)), a)),                  // q, k, v
             Buf(Mul(N, Q, a)),                                   // attention output
             Buf(Mul(N, U(m.n_heads), 4)),                        // log-sum-exp, fp32
             Buf(Mul(N, C, a)),                                   // residual after attention
             Buf(Mul(N, C, a)), stats);                           // norm2 output
}

uint64_t MlpActivationBytes(const ModelConfig& m, int64_t rows, DType dtype) {
  // fc/gate, [up], act
  return Mul(m.mlp == MlpKind::kSwiGlu ? 3 : 2, Buf(Mul(U(rows), U(m.d_ff), DTypeSize(dtype))));
}

uint64_t BlockActivationBytes(const ModelConfig& m, int64_t tokens, DType dtype) {
  return Sum(BlockNonMlpBytes(m, tokens, dtype), MlpActivationBytes(m, tokens, dtype));
}

ActivationBytes ComputeActivationBytes(const ModelConfig& m, const ActivationOptions& o) {
  const uint64_t N = Mul(U(o.micro_batch), U(o.seq_len));
  const uint64_t a = DTypeSize(o.dtype);
  const uint64_t C = U(m.d_model);
  const uint64_t Q = Mul(U(m.n_heads), U(m.head_dim));
  const uint64_t KV = Mul(U(m.n_kv_heads), U(m.head_dim));
  const uint64_t F = U(m.d_ff);
  const uint64_t V = U(m.vocab_size);
  const uint64_t L = U(m.n_layers);
  const bool layernorm = m.norm == NormKind::kLayerNorm;
  const bool swiglu = m.mlp == MlpKind::kSwiGlu;
  // BlockActivationBytes takes an int64_t token count.
  const int64_t tokens = N > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(N);

  ActivationBytes out;
  // The residual stream: every block's input and the last output, or with
  // the offload a ring on the device and the rest in pinned host memory.
  const uint64_t ring = std::min<uint64_t>(kCheckpointDeviceSlots, Sum(L, 1));
  const bool offload = o.offload_checkpoints && o.checkpointing;
  out.residual = Mul(offload ? ring : Sum(L, 1), Buf(Mul(N, C, a)));
  if (offload) {
    out.host_checkpoints = Mul(Sum(L, 1) - ring, N, C, a);
    out.checkpoint_transfer = out.host_checkpoints;
  }
  // The MLP's rows: all N, or one tile whose buffers the blocks share.
  const bool tiled = o.mlp_tile_rows > 0;
  const int64_t mlp_rows = tiled ? std::min(o.mlp_tile_rows, tokens) : tokens;
  const uint64_t sets = o.checkpointing ? 1 : L;
  out.blocks = tiled ? Sum(Mul(sets, BlockNonMlpBytes(m, tokens, o.dtype)),
                           MlpActivationBytes(m, mlp_rows, o.dtype))
                     : Mul(sets, BlockActivationBytes(m, tokens, o.dtype));
  out.final_norm = Sum(Buf(Mul(N, C, a)), Mul(layernorm ? 2 : 1, Buf(Mul(N, 4))));
  // One row chunk of logits (HeadChunkRows, as the model cuts them), a loss
  // per chunk, per-row losses and log-sum-exps.
  const uint64_t chunk_rows = U(HeadChunkRows(tokens, m.vocab_size));
  const uint64_t chunks = chunk_rows > 0 ? (N + chunk_rows - 1) / chunk_rows : 0;
  out.logits = Sum(Buf(Mul(chunk_rows, V, a)), Buf(Mul(chunks, 4)), Mul(2, Buf(Mul(N, 4))));
  // Token ids, targets, and packed samples' positions and sample starts.
  out.inputs = Mul(4, Buf(Mul(N, 4)));
  // dres, dln (N, C); datt (N, Q); dqkv (N, Q + 2KV); dact (MLP rows, F); SwiGLU adds
  // dgate, dup.
  out.gradients =
      Sum(Mul(2, Buf(Mul(N, C, a))), Buf(Mul(N, Q, a)), Buf(Mul(N, Sum(Q, Mul(2, KV)), a)),
          Mul(swiglu ? 3 : 1, Buf(Mul(U(mlp_rows), F, a))));
  return out;
}

int64_t RankPartParams(int64_t unit_params, int ranks) {
  if (ranks <= 1 || unit_params <= 0) return std::max<int64_t>(unit_params, 0);
  const int64_t chunks = (unit_params + kRankPartAlignParams - 1) / kRankPartAlignParams;
  const int64_t per_rank = (chunks + ranks - 1) / ranks;
  return std::min(unit_params, per_rank * kRankPartAlignParams);
}

SubGroupSummary SummarizeSubGroups(const ModelConfig& m, int64_t sub_group_params,
                                   double nvme_ratio, uint64_t state_bytes_per_param,
                                   uint64_t block_bytes, int ranks) {
  SubGroupSummary s;
  const int64_t S = std::max<int64_t>(sub_group_params, 1);
  const int64_t embedding = EmbeddingParameterCount(m);
  const int64_t layer = LayerParameterCount(m);
  const int64_t head = HeadParameterCount(m);
  // This rank's part of each unit (the whole unit with one rank).
  const int64_t layer_part = RankPartParams(layer, ranks);
  const int64_t total =
      RankPartParams(embedding, ranks) + m.n_layers * layer_part + RankPartParams(head, ranks);
  s.params = total;
  const double r = std::clamp(nvme_ratio, 0.0, 1.0);
  const int64_t host_target =
      r > 0 ? static_cast<int64_t>(std::llround((1.0 - r) * static_cast<double>(total)))
            : total + 1;
  const uint64_t full_block_bytes =
      RoundUp(static_cast<uint64_t>(S) * state_bytes_per_param, block_bytes);

  // Units in forward order; blocks are identical, so the per-unit work is
  // closed-form and the loop is over units, not sub-groups.
  int64_t offset = 0;
  auto unit = [&](int64_t whole) {
    if (whole <= 0) return;
    s.max_unit_params = std::max(s.max_unit_params, whole);
    const int64_t n = RankPartParams(whole, ranks);
    if (n <= 0) return;
    const int64_t slices = (n + S - 1) / S;
    const int64_t last = n - (slices - 1) * S;
    s.num_sub_groups += slices;
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
          RoundUp(static_cast<uint64_t>(last) * state_bytes_per_param, block_bytes);
    }
    offset += n;
  };
  unit(embedding);
  if (host_target <= offset + m.n_layers * layer_part && layer_part > 0) {
    for (int64_t i = 0; i < m.n_layers; ++i) unit(layer);
  } else {
    // No block reaches NVMe: account for them in one go (deep searches).
    const int64_t slices = (layer_part + S - 1) / S;
    s.num_sub_groups += m.n_layers * slices;
    if (m.n_layers > 0) {
      s.max_unit_params = std::max(s.max_unit_params, layer);
      s.max_group_params = std::max(s.max_group_params, std::min(layer_part, S));
    }
    offset += m.n_layers * layer_part;
  }
  unit(head);
  return s;
}

SubGroupSummary SummarizeSubGroups(const ModelConfig& m, SubGroupRule rule, double nvme_ratio,
                                   uint64_t state_bytes_per_param, uint64_t block_bytes,
                                   int ranks) {
  if (rule.cut == SubGroupCut::kSlices) {
    const uint64_t capped = std::min<uint64_t>(rule.params, INT64_MAX);
    return SummarizeSubGroups(m, static_cast<int64_t>(capped), nvme_ratio, state_bytes_per_param,
                              block_bytes, ranks);
  }
  SubGroupSummary s;
  const std::vector<ParamGroup> groups = ParameterGroups(m);
  // Each unit's tensors cut at the end of this rank's part.
  std::vector<std::vector<uint64_t>> parts;
  int64_t total = 0;
  for (const ParamGroup& g : groups) {
    uint64_t left = static_cast<uint64_t>(RankPartParams(g.num_params, ranks));
    total += static_cast<int64_t>(left);
    std::vector<uint64_t>& tensors = parts.emplace_back();
    for (const ParamTensor& t : g.tensors) {
      const uint64_t n = std::min(left, static_cast<uint64_t>(t.num_elements));
      tensors.push_back(n);
      left -= n;
    }
  }
  s.params = total;
  const double r = std::clamp(nvme_ratio, 0.0, 1.0);
  const int64_t host_target =
      r > 0 ? static_cast<int64_t>(std::llround((1.0 - r) * static_cast<double>(total)))
            : total + 1;
  int64_t offset = 0;
  for (size_t u = 0; u < groups.size(); ++u) {
    s.max_unit_params = std::max(s.max_unit_params, groups[u].num_params);
    for (uint64_t size : CutUnit(parts[u], rule)) {
      const auto n = static_cast<int64_t>(size);
      ++s.num_sub_groups;
      s.max_group_params = std::max(s.max_group_params, n);
      if (offset >= host_target) {
        ++s.nvme_sub_groups;
        s.nvme_params += n;
        s.max_nvme_group_params = std::max(s.max_nvme_group_params, n);
        s.nvme_block_bytes += RoundUp(size * state_bytes_per_param, block_bytes);
      }
      offset += n;
    }
  }
  return s;
}

GradBucketSizes GradBucketSizesOf(const ModelConfig& m) {
  GradBucketSizes out;
  for (const ParamGroup& g : ParameterGroups(m)) {
    out.whole_units = std::max(out.whole_units, g.num_params);
    int64_t rest = 0;  // the group without its vocabulary matrix
    for (size_t i = 0; i < g.tensors.size(); ++i) {
      const ParamTensor& t = g.tensors[i];
      const bool vocab_matrix = t.shape.size() == 2 && t.shape[0] == m.vocab_size &&
                                (g.name == "embeddings" || g.name == "head");
      if (vocab_matrix) continue;
      rest += t.num_elements;
      if (t.name.ends_with(".bias")) continue;
      // A weight and the bias right after it are written by one kernel.
      int64_t op = t.num_elements;
      if (i + 1 < g.tensors.size() && g.tensors[i + 1].name.ends_with(".bias")) {
        op += g.tensors[i + 1].num_elements;
      }
      out.tensors = std::max(out.tensors, op);
    }
    out.blocks = std::max(out.blocks, rest);
    int64_t mlp = 0;
    for (const ParamTensor& t : g.tensors) {
      if (t.name.find(".mlp.") != std::string::npos) mlp += t.num_elements;
    }
    out.mlp = std::max(out.mlp, mlp);
  }
  // A vocabulary slice holds at least one row.
  out.tensors = std::max(out.tensors, m.d_model);
  out.blocks = std::max(out.blocks, out.tensors);
  return out;
}

}  // namespace tierflow

// TransformerModel: activation buffers (one device allocation with typed
// views, llm.c style), seeded or checkpoint initialisation, and the step's
// orchestration: embeddings and blocks forward; the head's forward, loss and
// backward chunk by chunk over the rows; blocks (recomputed first under
// checkpointing) and embeddings backward, handing each unit's gradient bucket
// to the engine as soon as it is complete.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "model/checkpoint_offload.h"
#include "model/grad_pieces.h"
#include "model/hf_model.h"
#include "model/transformer_block.h"

namespace tierflow {

using model_internal::BlockActs;
using model_internal::BlockScratch;
using model_internal::CheckpointOffload;
using model_internal::Dims;
using model_internal::GradOp;
using model_internal::GradPieceWriter;
using model_internal::MakeDims;

struct TransformerModel::Buffers {
  DeviceBuffer memory;
  PinnedBuffer loss_host;  // (chunks) fp32, each head chunk's loss copied back
  // (N, C) each: the input of each block, then the last output (L + 1), or
  // with offload_checkpoints the device ring of CheckpointOffload's slots.
  std::vector<void*> residual;
  std::vector<BlockActs> blocks;  // L sets, or 1 shared set under checkpointing
  void* xf = nullptr;             // (N, C) final norm output
  float* xf_mean = nullptr;       // (N)
  float* xf_rstd = nullptr;       // (N)
  void* logits = nullptr;         // (chunk rows, V), then dlogits in place
  float* loss = nullptr;          // (chunks) each head chunk's mean loss
  float* row_losses = nullptr;    // (N)
  float* row_lse = nullptr;       // (N) each row's log-sum-exp (the sliced head's second pass)
  int32_t* tokens = nullptr;      // (N)
  int32_t* targets = nullptr;     // (N)
  int32_t* positions = nullptr;   // (N) packed samples' positions (MicroBatch::positions)
  int32_t* seq_start = nullptr;   // (N) the row index where each token's sample starts
  std::vector<int32_t> seq_start_host;  // staging for seq_start's copy
  void* dres = nullptr;                 // (N, C) residual-stream gradient
  BlockScratch scratch;
};

namespace {

constexpr int32_t kIgnoreIndex = -100;

// Assigns 256-byte-aligned offsets in one allocation; with a null base it only counts.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  void* Take(uint64_t num_bytes) {
    const uint64_t at = used_;
    used_ += (num_bytes + 255) / 256 * 256;
    return base_ != nullptr ? base_ + at : nullptr;
  }
  float* Floats(uint64_t n) { return static_cast<float*>(Take(n * 4)); }
  uint64_t used() const { return used_; }

 private:
  char* base_;
  uint64_t used_ = 0;
};

// Lays out every activation buffer of `b` (pointers only when base != null);
// returns the bytes used.
uint64_t Carve(char* base, const ModelConfig& c, const TrainShape& shape,
               TransformerModel::Buffers* b) {
  const Dims d = MakeDims(c, shape.batch, shape.seq_len);
  const uint64_t es = DTypeSize(shape.dtype);
  const uint64_t N = static_cast<uint64_t>(d.N);
  Carver cv(base);
  TransformerModel::Buffers local;
  TransformerModel::Buffers& buf = b != nullptr ? *b : local;
  const int L = static_cast<int>(c.n_layers);
  buf.residual.assign(
      static_cast<size_t>(shape.offload_checkpoints ? CheckpointOffload::DeviceSlots(L) : L + 1),
      nullptr);
  for (void*& r : buf.residual) r = cv.Take(N * d.C * es);
  const int sets = shape.checkpoint_activations ? 1 : static_cast<int>(c.n_layers);
  const bool tiled = shape.mlp_tile_rows > 0;
  // The MLP's hidden rows: all N, or one tile (its buffers shared by the blocks).
  const uint64_t mlp_rows = tiled ? std::min<uint64_t>(shape.mlp_tile_rows, N) : N;
  auto carve_mlp = [&](BlockActs& a) {
    a.fc = cv.Take(mlp_rows * d.F * es);
    if (d.swiglu) a.up = cv.Take(mlp_rows * d.F * es);
    a.act = cv.Take(mlp_rows * d.F * es);
  };
  buf.blocks.assign(static_cast<size_t>(sets), BlockActs{});
  for (BlockActs& a : buf.blocks) {
    a.ln1 = cv.Take(N * d.C * es);
    if (d.layernorm) a.ln1_mean = cv.Floats(N);
    a.ln1_rstd = cv.Floats(N);
    a.qkv = cv.Take(N * (d.Q + 2 * d.KV) * es);
    a.att = cv.Take(N * d.Q * es);
    a.lse = cv.Floats(N * d.NH);
    a.mid = cv.Take(N * d.C * es);
    a.ln2 = cv.Take(N * d.C * es);
    if (d.layernorm) a.ln2_mean = cv.Floats(N);
    a.ln2_rstd = cv.Floats(N);
    if (!tiled) carve_mlp(a);
  }
  if (tiled) {
    BlockActs mlp;
    carve_mlp(mlp);
    for (BlockActs& a : buf.blocks) {
      a.fc = mlp.fc;
      a.up = mlp.up;
      a.act = mlp.act;
    }
  }
  buf.xf = cv.Take(N * d.C * es);
  if (d.layernorm) buf.xf_mean = cv.Floats(N);
  buf.xf_rstd = cv.Floats(N);
  const int64_t chunk_rows =
      HeadChunkRows(d.N, d.V, shape.head_chunk_logits, shape.head_chunk_min_rows);
  buf.logits = cv.Take(static_cast<uint64_t>(chunk_rows) * d.V * es);
  buf.loss = cv.Floats(static_cast<uint64_t>((d.N + chunk_rows - 1) / chunk_rows));
  buf.row_losses = cv.Floats(N);
  buf.row_lse = cv.Floats(N);
  buf.tokens = static_cast<int32_t*>(cv.Take(N * 4));
  buf.targets = static_cast<int32_t*>(cv.Take(N * 4));
  buf.positions = static_cast<int32_t*>(cv.Take(N * 4));
  buf.seq_start = static_cast<int32_t*>(cv.Take(N * 4));
  buf.dres = cv.Take(N * d.C * es);
  buf.scratch.dln = cv.Take(N * d.C * es);
  buf.scratch.datt = cv.Take(N * d.Q * es);
  buf.scratch.dqkv = cv.Take(N * (d.Q + 2 * d.KV) * es);
  buf.scratch.dact = cv.Take(mlp_rows * d.F * es);
  if (d.swiglu) {
    buf.scratch.dgate = cv.Take(mlp_rows * d.F * es);
    buf.scratch.dup = cv.Take(mlp_rows * d.F * es);
  }
  return cv.used();
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GPT-2's residual projections (scaled init): attention out and MLP down.
bool IsResidualProjection(const std::string& name) {
  return EndsWith(name, "attn.c_proj.weight") || EndsWith(name, "mlp.c_proj.weight") ||
         EndsWith(name, "o_proj.weight") || EndsWith(name, "down_proj.weight");
}

}  // namespace

TransformerModel::TransformerModel(Device& device, ParamLayout layout, const TrainShape& shape,
                                   const TransformerInit& init)
    : device_(device), layout_(std::move(layout)), shape_(shape), init_(init) {}

TransformerModel::~TransformerModel() = default;

uint64_t TransformerModel::checkpoint_host_bytes() const {
  return offload_ != nullptr ? offload_->host_bytes() : 0;
}

uint64_t TransformerModel::ActivationBytes(const ModelConfig& config, const TrainShape& shape) {
  return Carve(nullptr, config, shape, nullptr);
}

StatusOr<std::unique_ptr<TransformerModel>> TransformerModel::Create(Device& device,
                                                                     const ModelConfig& config,
                                                                     const TrainShape& shape,
                                                                     const TransformerInit& init) {
  TF_ASSIGN_OR_RETURN(ParamLayout layout, MakeParamLayout(config));
  if (shape.batch < 1 || shape.seq_len < 1) {
    return InvalidArgumentError("transformer '" + config.name + "': batch (" +
                                std::to_string(shape.batch) + ") and seq_len (" +
                                std::to_string(shape.seq_len) + ") must be >= 1");
  }
  if (shape.mlp_tile_rows < 0 || shape.mlp_tile_rows % kGemmCpuKPanel != 0) {
    return InvalidArgumentError(
        "transformer '" + config.name + "': TrainShape::mlp_tile_rows (" +
        std::to_string(shape.mlp_tile_rows) + ") must be 0 (untiled) or a positive multiple of " +
        std::to_string(kGemmCpuKPanel) + " (kGemmCpuKPanel, the GEMM's reduction panel)");
  }
  if (shape.head_chunk_logits < 1 || shape.head_chunk_min_rows < 1) {
    return InvalidArgumentError("transformer '" + config.name +
                                "': head_chunk_logits and head_chunk_min_rows must be >= 1");
  }
  const bool scaling_applied = config.rope_scaling_type.empty() ||
                               config.rope_scaling_type == "linear" ||
                               config.rope_scaling_type == "llama3";
  if (!scaling_applied && !shape.allow_unscaled_rope) {
    return UnimplementedError(
        "transformer '" + config.name + "': rope_scaling '" + config.rope_scaling_type +
        "' is not implemented (tierflow applies 'linear' and 'llama3'); set "
        "TrainShape::allow_unscaled_rope to train with plain RoPE (the model then differs "
        "from its Hugging Face twin)");
  }
  if (config.sliding_window > 0 && shape.seq_len > config.sliding_window) {
    return UnimplementedError(
        "transformer '" + config.name + "': seq_len " + std::to_string(shape.seq_len) +
        " exceeds the sliding window (" + std::to_string(config.sliding_window) +
        "), which tierflow's attention does not apply; use a shorter seq_len");
  }
  if (shape.offload_checkpoints && !shape.checkpoint_activations) {
    return InvalidArgumentError("transformer '" + config.name +
                                "': offloading the activation checkpoints needs activation "
                                "checkpointing on (there are no checkpoints without it)");
  }
  if (shape.seq_len > config.max_seq_len) {
    return InvalidArgumentError("transformer '" + config.name + "': seq_len " +
                                std::to_string(shape.seq_len) + " exceeds the model's " +
                                std::to_string(config.max_seq_len) + " positions");
  }
  std::unique_ptr<TransformerModel> model(
      new TransformerModel(device, std::move(layout), shape, init));
  if (!init.weights_dir.empty()) {
    TF_ASSIGN_OR_RETURN(HfCheckpoint checkpoint, HfCheckpoint::Open(init.weights_dir));
    TF_RETURN_IF_ERROR(ValidateHfCheckpoint(
        checkpoint, model->layout_,
        init.allow_unused_tensors ? UnusedHfTensorPolicy::kAllow : UnusedHfTensorPolicy::kRefuse));
    if (init.allow_unused_tensors) {
      model->unused_tensors_ = UnusedHfTensors(checkpoint, model->layout_);
    }
    model->checkpoint_ = std::make_unique<HfCheckpoint>(std::move(checkpoint));
  }
  TF_RETURN_IF_ERROR(model->Allocate());
  return model;
}

Status TransformerModel::Allocate() {
  buf_ = std::make_unique<Buffers>();
  activation_bytes_ = Carve(nullptr, layout_.config, shape_, nullptr);
  TF_ASSIGN_OR_RETURN(buf_->memory, device_.Allocate(activation_bytes_, "transformer activations"));
  Carve(static_cast<char*>(buf_->memory.data()), layout_.config, shape_, buf_.get());
  const int64_t rows = int64_t{shape_.batch} * shape_.seq_len;
  const int64_t chunk_rows = HeadChunkRows(rows, layout_.config.vocab_size,
                                           shape_.head_chunk_logits, shape_.head_chunk_min_rows);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  TF_ASSIGN_OR_RETURN(
      buf_->loss_host,
      device_.AllocatePinned(static_cast<size_t>(chunks) * sizeof(float), "transformer loss"));
  if (shape_.offload_checkpoints) {
    const uint64_t bytes_each = static_cast<uint64_t>(rows) *
                                static_cast<uint64_t>(layout_.config.d_model) *
                                DTypeSize(shape_.dtype);
    TF_ASSIGN_OR_RETURN(offload_, CheckpointOffload::Create(device_, layout_.num_layers(),
                                                            bytes_each, buf_->residual));
  }
  return Status::Ok();
}

std::vector<int> TransformerModel::WeightsSchedule() const {
  const int L = layout_.num_layers();
  std::vector<int> order{layout_.embedding_unit()};
  for (int l = 0; l < L; ++l) order.push_back(layout_.layer_unit(l));
  order.push_back(layout_.head_unit());
  if (layout_.head.lm_head < 0) order.push_back(layout_.embedding_unit());
  for (int l = L - 1; l >= 0; --l) order.push_back(layout_.layer_unit(l));
  return order;
}

Status TransformerModel::InitialWeights(int unit, float* out) {
  if (unit < 0 || static_cast<size_t>(unit) >= layout_.units.size()) {
    return InvalidArgumentError("InitialWeights: no unit " + std::to_string(unit));
  }
  if (checkpoint_ != nullptr) return ReadHfUnit(*checkpoint_, layout_, unit, out);
  // Seeded per unit, so a unit's weights do not depend on the order units are asked for.
  std::mt19937_64 rng(init_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(unit) + 1);
  const float residual_std =
      init_.init_std /
      std::sqrt(2.0f * static_cast<float>(std::max<int64_t>(1, layout_.config.n_layers)));
  for (const TensorSlot& s : layout_.tensors[unit]) {
    float* t = out + s.offset;
    const int64_t n = s.tensor.num_elements;
    if (s.tensor.shape.size() == 1) {
      // 1-D tensors are norm weights (1) and biases (0).
      const float value = EndsWith(s.tensor.name, ".bias") ? 0.0f : 1.0f;
      for (int64_t i = 0; i < n; ++i) t[i] = value;
      continue;
    }
    std::normal_distribution<float> dist(
        0.0f, IsResidualProjection(s.tensor.name) ? residual_std : init_.init_std);
    for (int64_t i = 0; i < n; ++i) t[i] = dist(rng);
  }
  return Status::Ok();
}

StatusOr<float> TransformerModel::LastLoss() {
  if (!ran_) return FailedPreconditionError("LastLoss before any ForwardBackward");
  if (offload_ != nullptr) TF_RETURN_IF_ERROR(offload_->Check());
  // The mean over all valid targets, from each chunk's mean over its own.
  double loss = 0;
  for (size_t c = 0; c < chunk_weights_.size(); ++c) {
    if (chunk_weights_[c] > 0) loss += double{buf_->loss_host.as<float>()[c]} * chunk_weights_[c];
  }
  return static_cast<float>(loss);
}

Status TransformerModel::ForwardBackward(Stream& compute, const MicroBatch& batch,
                                         float dloss_scale, UnitAccess& access) {
  if (batch.inputs == nullptr || batch.targets == nullptr) {
    return InvalidArgumentError("transformer '" + layout_.config.name +
                                "': a micro-batch needs token inputs and targets");
  }
  if (batch.batch < 1 || batch.batch > shape_.batch || batch.seq_len < 1 ||
      batch.seq_len > shape_.seq_len) {
    return InvalidArgumentError("transformer '" + layout_.config.name + "': micro-batch shape (" +
                                std::to_string(batch.batch) + ", " + std::to_string(batch.seq_len) +
                                ") outside the allocated (1.." + std::to_string(shape_.batch) +
                                ", 1.." + std::to_string(shape_.seq_len) + ")");
  }
  const int64_t n = static_cast<int64_t>(batch.batch) * batch.seq_len;
  const int64_t vocab = layout_.config.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    if (batch.inputs[i] < 0 || batch.inputs[i] >= vocab) {
      return InvalidArgumentError("transformer: input token " + std::to_string(batch.inputs[i]) +
                                  " at position " + std::to_string(i) + " is outside [0, " +
                                  std::to_string(vocab) + ")");
    }
    const int32_t t = batch.targets[i];
    if (t != kIgnoreIndex && (t < 0 || t >= vocab)) {
      return InvalidArgumentError("transformer: target " + std::to_string(t) + " at position " +
                                  std::to_string(i) + " is outside [0, " + std::to_string(vocab) +
                                  ") and not the ignore index -100");
    }
  }
  if (batch.positions != nullptr) {
    if (layout_.embedding.wpe >= 0) {
      return InvalidArgumentError(
          "transformer '" + layout_.config.name +
          "': packed samples (restarting positions) need a RoPE model (Llama, Qwen, Mistral); "
          "GPT-2's learned positions are not restarted. Train it without packing.");
    }
    // Each row is samples laid end to end: positions 0, 1, 2, ... restarting
    // at 0, so a token's sample starts at its index minus its position.
    for (int64_t r = 0; r < batch.batch; ++r) {
      for (int64_t t = 0; t < batch.seq_len; ++t) {
        const int32_t p = batch.positions[r * batch.seq_len + t];
        const int32_t prev = t > 0 ? batch.positions[r * batch.seq_len + t - 1] : -1;
        if (p != 0 && p != prev + 1) {
          return InvalidArgumentError(
              "transformer: position " + std::to_string(p) + " at row " + std::to_string(r) +
              ", token " + std::to_string(t) +
              ": packed positions must count up from 0 within each sample (0, 1, 2, ...)");
        }
      }
    }
  }
  ran_ = true;
  switch (shape_.dtype) {
    case DType::kF32:
      return Run<float>(compute, batch, dloss_scale, access);
    case DType::kBF16:
      return Run<bf16>(compute, batch, dloss_scale, access);
    case DType::kF16:
      return Run<fp16>(compute, batch, dloss_scale, access);
  }
  return InternalError("transformer: unknown dtype");
}

// What Run's stages share for one micro-batch.
template <typename T>
struct TransformerModel::RunState {
  Buffers& b;
  const MicroBatch& batch;
  float dloss_scale = 1;
  Dims d;
  EmbeddingShape es;
  bool checkpointing = false;
  bool tied = false;  // the LM head is the embeddings' wte
  int emb_unit = 0, head_unit = 0;
  uint64_t emb_params = 0;
  const T* emb = nullptr;      // the embedding unit's weights, while taken
  const T* lm_head = nullptr;  // (V, C)
  bool sliced = false;         // the LM head's weight gradient in vocabulary slices
  float* g_emb = nullptr;      // the tied wte's gradient, begun by the head
  HeadSlicing slicing{};
  CheckpointOffload* offload = nullptr;  // with offload_checkpoints

  T* residual(int l) const {
    return static_cast<T*>(offload != nullptr ? offload->Slot(l) : b.residual[l]);
  }
  uint64_t residual_bytes() const { return static_cast<uint64_t>(d.N * d.C) * sizeof(T); }
  const BlockActs& acts(int l) const { return b.blocks[checkpointing ? 0 : l]; }
};

namespace {

template <typename T>
StatusOr<const T*> TakeWeights(UnitAccess& access, int unit) {
  TF_ASSIGN_OR_RETURN(void* p, access.Weights(unit));
  return static_cast<const T*>(p);
}

}  // namespace

template <typename T>
Status TransformerModel::UploadBatch(Stream& s, RunState<T>& st) {
  Buffers& b = st.b;
  Dims& d = st.d;
  const MicroBatch& batch = st.batch;
  TF_RETURN_IF_ERROR(s.CopyHostToDevice(b.tokens, batch.inputs, d.N * sizeof(int32_t)));
  TF_RETURN_IF_ERROR(s.CopyHostToDevice(b.targets, batch.targets, d.N * sizeof(int32_t)));
  if (batch.positions != nullptr) {
    // Staged in a member: the copy may run after this returns (the caller
    // synchronizes before the next micro-batch overwrites it).
    b.seq_start_host.resize(static_cast<size_t>(d.N));
    for (int64_t i = 0; i < d.N; ++i) {
      b.seq_start_host[i] = static_cast<int32_t>(i % d.T) - batch.positions[i];
    }
    TF_RETURN_IF_ERROR(s.CopyHostToDevice(b.positions, batch.positions, d.N * sizeof(int32_t)));
    TF_RETURN_IF_ERROR(
        s.CopyHostToDevice(b.seq_start, b.seq_start_host.data(), d.N * sizeof(int32_t)));
    d.positions = b.positions;
    d.seq_start = b.seq_start;
  }
  return Status::Ok();
}

// Each unit's weights are taken just before its first kernel, in forward
// order: the engine makes the host wait until that unit's previous update
// is enqueued, so the next step's forward starts as soon as its first
// units are updated, while the optimizer still works on the rest.
// Each take is released as soon as its kernels are enqueued, and taken
// again for backward (WeightsSchedule), so a streamed unit holds a device
// slot only while it is used.
template <typename T>
Status TransformerModel::Forward(Stream& s, RunState<T>& st, UnitAccess& access) {
  const Dims& d = st.d;
  TF_ASSIGN_OR_RETURN(st.emb, TakeWeights<T>(access, st.emb_unit));
  const T* wpe = layout_.embedding.wpe >= 0 ? st.emb + layout_.embedding.wpe : nullptr;
  TF_RETURN_IF_ERROR(EmbeddingForward<T>(s, st.residual(0), st.b.tokens,
                                         st.emb + layout_.embedding.wte, wpe, st.es));
  if (st.offload != nullptr) TF_RETURN_IF_ERROR(st.offload->AfterWrite(s, 0, st.residual_bytes()));
  TF_RETURN_IF_ERROR(access.ReleaseWeights(st.emb_unit));
  for (int l = 0; l < layout_.num_layers(); ++l) {
    TF_ASSIGN_OR_RETURN(const T* wl, TakeWeights<T>(access, layout_.layer_unit(l)));
    if (st.offload != nullptr) TF_RETURN_IF_ERROR(st.offload->BeforeWrite(s, l + 1));
    TF_RETURN_IF_ERROR(model_internal::BlockForward<T>(s, d, layout_.layer, wl, st.residual(l),
                                                       st.residual(l + 1), st.acts(l)));
    if (st.offload != nullptr) {
      TF_RETURN_IF_ERROR(st.offload->AfterWrite(s, l + 1, st.residual_bytes()));
    }
    TF_RETURN_IF_ERROR(access.ReleaseWeights(layout_.layer_unit(l)));
  }
  return Status::Ok();
}

// The head's logits, loss and their gradient, chunk by chunk over the rows;
// `d_lm_head` null when the LM head's weight gradient comes in slices. Each
// chunk's cross-entropy is a mean over its own valid targets; weighting it
// by (chunk valid / all valid) makes the sum the mean over the batch.
template <typename T>
Status TransformerModel::HeadLossChunks(Stream& s, RunState<T>& st, float* d_lm_head) {
  const Dims& d = st.d;
  Buffers& b = st.b;
  T* xf = static_cast<T*>(b.xf);
  T* logits = static_cast<T*>(b.logits);
  T* dln = static_cast<T*>(b.scratch.dln);
  const int64_t chunk_rows =
      HeadChunkRows(d.N, d.V, shape_.head_chunk_logits, shape_.head_chunk_min_rows);
  const int64_t chunks = (d.N + chunk_rows - 1) / chunk_rows;
  std::vector<int64_t> valid(static_cast<size_t>(chunks), 0);
  int64_t total_valid = 0;
  for (int64_t i = 0; i < d.N; ++i) {
    if (st.batch.targets[i] != kIgnoreIndex) {
      ++valid[static_cast<size_t>(i / chunk_rows)];
      ++total_valid;
    }
  }
  chunk_weights_.assign(static_cast<size_t>(chunks), 0.0);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * chunk_rows;
    const int64_t rows = std::min(chunk_rows, d.N - r0);
    const double weight =
        total_valid > 0 ? static_cast<double>(valid[c]) / static_cast<double>(total_valid) : 0.0;
    chunk_weights_[c] = weight;
    TF_RETURN_IF_ERROR(model_internal::LinearForward<T>(s, logits, xf + r0 * d.C, st.lm_head,
                                                        nullptr, rows, d.C, d.V, false, 0.0f));
    CrossEntropyOptions ce;
    ce.ignore_index = kIgnoreIndex;
    ce.grad_scale = static_cast<float>(st.dloss_scale * weight);
    if (st.sliced) ce.row_lse = b.row_lse + r0;
    TF_RETURN_IF_ERROR(SoftmaxCrossEntropy<T>(s, b.loss + c, b.row_losses + r0, logits, logits,
                                              b.targets + r0, CrossEntropyShape{rows, d.V, 0}, ce));
    TF_RETURN_IF_ERROR(model_internal::LinearBackward<T>(s, dln + r0 * d.C, 0.0f, d_lm_head,
                                                         nullptr, logits, xf + r0 * d.C, st.lm_head,
                                                         rows, d.C, d.V, false));
  }
  st.slicing = HeadSlicing{total_valid, st.dloss_scale};
  return s.CopyDeviceToHost(b.loss_host.data(), b.loss,
                            static_cast<size_t>(chunks) * sizeof(float));
}

// The head: the final norm, the loss and the gradient back to the residual
// stream; the head's weight gradients (the LM head's whole, or in slices
// after the rows).
template <typename T>
Status TransformerModel::Head(Stream& s, RunState<T>& st, UnitAccess& access) {
  const Dims& d = st.d;
  Buffers& b = st.b;
  const int L = layout_.num_layers();
  const int head_unit = st.head_unit;
  TF_ASSIGN_OR_RETURN(const T* head, TakeWeights<T>(access, head_unit));
  // Tied: the LM head is the embeddings' wte, taken again and held to the
  // end (its vocabulary slices, if any, run after the blocks' backward).
  if (st.tied) {
    TF_ASSIGN_OR_RETURN(st.emb, TakeWeights<T>(access, st.emb_unit));
  }
  T* xf = static_cast<T*>(b.xf);
  const T* head_norm_b = layout_.head.norm_b >= 0 ? head + layout_.head.norm_b : nullptr;
  TF_RETURN_IF_ERROR(model_internal::NormForward<T>(s, d, xf, b.xf_mean, b.xf_rstd, st.residual(L),
                                                    head + layout_.head.norm_w, head_norm_b));
  st.lm_head = st.tied ? st.emb + layout_.embedding.wte : head + layout_.head.lm_head;
  TF_RETURN_IF_ERROR(PlanPieces(access.GradPieceCapacity()));
  const uint64_t head_params = layout_.units[head_unit].num_params;
  // The LM head's weight gradient in vocabulary slices, after the row
  // chunks: when its unit (the head, or the tied embeddings) does not fit
  // one bucket.
  st.sliced = st.tied ? !pieces_.embedding_whole : !pieces_.head_whole;
  float* g_head = nullptr;
  if (pieces_.head_whole) {
    TF_ASSIGN_OR_RETURN(g_head, access.BeginGrads(head_unit, 0, head_params));
  }
  if (st.tied && !st.sliced) {
    // The tied wte gets gradients from the head now and the embedding last.
    TF_ASSIGN_OR_RETURN(st.g_emb, access.BeginGrads(st.emb_unit, 0, st.emb_params));
  }
  float* d_lm_head =
      st.sliced ? nullptr
                : (st.tied ? st.g_emb + layout_.embedding.wte : g_head + layout_.head.lm_head);
  TF_RETURN_IF_ERROR(HeadLossChunks(s, st, d_lm_head));
  T* dres = static_cast<T*>(b.dres);
  TF_RETURN_IF_ERROR(s.Memset(dres, 0, static_cast<size_t>(d.N * d.C) * sizeof(T)));
  // The final norm's gradient: in the whole head's bucket, or its own piece.
  const int64_t norm_params = pieces_.head_norm.end() - pieces_.head_norm.begin();
  float* g_norm = g_head;
  if (!pieces_.head_whole) {
    TF_ASSIGN_OR_RETURN(g_norm,
                        access.BeginGrads(head_unit, 0, static_cast<uint64_t>(norm_params)));
  }
  TF_RETURN_IF_ERROR(model_internal::NormBackward<T>(
      s, d, dres, g_norm + layout_.head.norm_w,
      layout_.head.norm_b >= 0 ? g_norm + layout_.head.norm_b : nullptr,
      static_cast<T*>(b.scratch.dln), st.residual(L), head + layout_.head.norm_w, b.xf_mean,
      b.xf_rstd));
  TF_RETURN_IF_ERROR(access.EndGrads(head_unit));
  if (st.sliced && !st.tied) {
    TF_RETURN_IF_ERROR(WeightGradSlices<T>(s, d, st.batch, access, head_unit, layout_.head.lm_head,
                                           st.lm_head, st.slicing,
                                           /*embedding=*/false));
  }
  TF_RETURN_IF_ERROR(access.ReleaseWeights(head_unit));
  if (st.tied && !st.sliced) TF_RETURN_IF_ERROR(access.ReleaseWeights(st.emb_unit));
  return Status::Ok();
}

// The blocks' backward, last first, then the embeddings'.
template <typename T>
Status TransformerModel::Backward(Stream& s, RunState<T>& st, UnitAccess& access) {
  const Dims& d = st.d;
  Buffers& b = st.b;
  T* dres = static_cast<T*>(b.dres);
  for (int l = layout_.num_layers() - 1; l >= 0; --l) {
    TF_ASSIGN_OR_RETURN(const T* wl, TakeWeights<T>(access, layout_.layer_unit(l)));
    if (st.offload != nullptr) {
      TF_RETURN_IF_ERROR(st.offload->BeforeBackward(s, l, st.residual_bytes()));
    }
    if (st.checkpointing) {
      // Recompute the block's activations from its saved input. Its output
      // lands on residual(l + 1), which backward no longer needs.
      // A tiled MLP is recomputed tile by tile in BlockBackward instead.
      TF_RETURN_IF_ERROR(model_internal::BlockForward<T>(s, d, layout_.layer, wl, st.residual(l),
                                                         st.residual(l + 1), st.acts(l),
                                                         /*mlp=*/d.mlp_rows == 0));
    }
    GradPieceWriter g(access, layout_.layer_unit(l), pieces_.layer_ops, pieces_.layer);
    TF_RETURN_IF_ERROR(model_internal::BlockBackward<T>(s, d, layout_.layer, wl, g, st.residual(l),
                                                        dres, st.acts(l), b.scratch));
    TF_RETURN_IF_ERROR(access.ReleaseWeights(layout_.layer_unit(l)));
  }

  const int emb_unit = st.emb_unit;
  if (pieces_.embedding_whole) {
    if (!st.tied) {
      TF_ASSIGN_OR_RETURN(st.g_emb, access.BeginGrads(emb_unit, 0, st.emb_params));
    }
    float* dwpe = layout_.embedding.wpe >= 0 ? st.g_emb + layout_.embedding.wpe : nullptr;
    TF_RETURN_IF_ERROR(
        EmbeddingBackward<T>(s, st.g_emb + layout_.embedding.wte, dwpe, dres, b.tokens, st.es));
    return access.EndGrads(emb_unit);
  }
  // wte in row slices (with the tied head's share), then the positions.
  TF_RETURN_IF_ERROR(WeightGradSlices<T>(s, d, st.batch, access, emb_unit, layout_.embedding.wte,
                                         st.lm_head, st.slicing, /*embedding=*/true));
  if (st.tied) TF_RETURN_IF_ERROR(access.ReleaseWeights(emb_unit));
  if (layout_.embedding.wpe < 0) return Status::Ok();
  const uint64_t wpe_params = st.emb_params - static_cast<uint64_t>(layout_.embedding.wpe);
  TF_ASSIGN_OR_RETURN(float* dwpe, access.BeginGrads(emb_unit, layout_.embedding.wpe, wpe_params));
  TF_RETURN_IF_ERROR(EmbeddingBackward<T>(s, nullptr, dwpe, dres, b.tokens, st.es));
  return access.EndGrads(emb_unit);
}

template <typename T>
Status TransformerModel::Run(Stream& s, const MicroBatch& batch, float dloss_scale,
                             UnitAccess& access) {
  Dims d = MakeDims(layout_.config, batch.batch, batch.seq_len);
  d.mlp_rows = shape_.mlp_tile_rows;
  RunState<T> st{*buf_, batch, dloss_scale, d, EmbeddingShape{d.B, d.T, d.C, d.V}};
  st.checkpointing = shape_.checkpoint_activations;
  st.tied = layout_.head.lm_head < 0;
  st.emb_unit = layout_.embedding_unit();
  st.head_unit = layout_.head_unit();
  st.emb_params = layout_.units[st.emb_unit].num_params;
  st.offload = offload_.get();
  // The previous micro-batch's copies are done (its backward waited on
  // them): report their errors before reusing the store.
  if (st.offload != nullptr) TF_RETURN_IF_ERROR(st.offload->Check());
  TF_RETURN_IF_ERROR(UploadBatch(s, st));
  TF_RETURN_IF_ERROR(Forward(s, st, access));
  TF_RETURN_IF_ERROR(Head(s, st, access));
  return Backward(s, st, access);
}

template <typename T>
Status TransformerModel::WeightGradSlices(Stream& s, const model_internal::Dims& d,
                                          const MicroBatch& batch, UnitAccess& access, int unit,
                                          int64_t offset, const T* lm_head, const HeadSlicing& head,
                                          bool embedding) {
  const bool tied = layout_.head.lm_head < 0;
  // The head's share: the unit holding the LM head's weights (the head, or
  // the tied embeddings). The embedding's share: the wte rows of the slice.
  const bool head_share = embedding ? tied : true;
  const int64_t slice_rows = pieces_.vocab_slice_rows;
  // Rows of slice logits per chunk: as many as the first pass's logits
  // buffer holds (its chunk rows x V; the budget itself may be a little
  // more than that buffer, as budget / V rounds down).
  const int64_t logits_capacity =
      HeadChunkRows(d.N, d.V, shape_.head_chunk_logits, shape_.head_chunk_min_rows) * d.V;
  const int64_t chunk_rows = HeadChunkRows(d.N, slice_rows, logits_capacity, 1);
  T* logits = static_cast<T*>(buf_->logits);
  const T* xf = static_cast<const T*>(buf_->xf);
  // Valid targets per row chunk of this pass (the chunks differ from the
  // first pass's: each holds a slice's columns, not the whole vocabulary).
  const int64_t chunks = (d.N + chunk_rows - 1) / chunk_rows;
  std::vector<int64_t> valid(static_cast<size_t>(chunks), 0);
  for (int64_t i = 0; i < d.N; ++i) {
    if (batch.targets[i] != kIgnoreIndex) ++valid[static_cast<size_t>(i / chunk_rows)];
  }
  EmbeddingShape es{d.B, d.T, d.C, d.V};
  for (int64_t v0 = 0; v0 < d.V; v0 += slice_rows) {
    const int64_t vs = std::min(slice_rows, d.V - v0);
    TF_ASSIGN_OR_RETURN(float* dw, access.BeginGrads(unit, static_cast<uint64_t>(offset + v0 * d.C),
                                                     static_cast<uint64_t>(vs * d.C)));
    if (head_share) {
      const T* w_slice = lm_head + v0 * d.C;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t r0 = c * chunk_rows;
        const int64_t rows = std::min(chunk_rows, d.N - r0);
        const double weight = head.total_valid > 0 ? static_cast<double>(valid[c]) /
                                                         static_cast<double>(head.total_valid)
                                                   : 0.0;
        // Recompute the slice's logits; their gradient from each row's
        // log-sum-exp of the first pass; dW (slice) += dlogits^T xf.
        TF_RETURN_IF_ERROR(model_internal::LinearForward<T>(s, logits, xf + r0 * d.C, w_slice,
                                                            nullptr, rows, d.C, vs, false, 0.0f));
        CrossEntropyOptions ce;
        ce.ignore_index = kIgnoreIndex;
        ce.grad_scale = static_cast<float>(head.dloss_scale * weight);
        TF_RETURN_IF_ERROR(SoftmaxCrossEntropyGradSlice<T>(
            s, logits, logits, buf_->row_lse + r0, buf_->targets + r0,
            CrossEntropyShape{rows, vs, 0}, v0, d.V, ce));
        TF_RETURN_IF_ERROR(model_internal::LinearBackward<T>(
            s, nullptr, 0.0f, dw, nullptr, logits, xf + r0 * d.C, w_slice, rows, d.C, vs, false));
      }
    }
    if (embedding) {
      EmbeddingShape slice = es;
      slice.grad_row_begin = v0;
      slice.grad_rows = vs;
      TF_RETURN_IF_ERROR(EmbeddingBackward<T>(s, dw, nullptr, static_cast<const T*>(buf_->dres),
                                              buf_->tokens, slice));
    }
    TF_RETURN_IF_ERROR(access.EndGrads(unit));
  }
  return Status::Ok();
}

namespace {

// A tiled MLP adds every tile's gradients to all of the block's MLP weights,
// so their ops (BlockGradOrder's first) become one op, in one piece.
Status MergeMlpOps(const ModelConfig& c, const Dims& d, const LayerOffsets& o, uint64_t capacity,
                   std::vector<GradOp>& ops) {
  const size_t n = model_internal::BlockMlpGradOps(d);
  int64_t lo = INT64_MAX, hi = 0, sum = 0;
  for (size_t i = 0; i < n; ++i) {
    lo = std::min(lo, ops[i].begin());
    hi = std::max(hi, ops[i].end());
    sum += ops[i].end() - ops[i].begin();
  }
  if (sum != hi - lo || lo != model_internal::MlpGradBegin(d, o)) {
    return InternalError("transformer: the block's MLP weights are not one contiguous range");
  }
  if (static_cast<uint64_t>(sum) > capacity) {
    return InvalidArgumentError("transformer '" + c.name +
                                "': TrainShape::mlp_tile_rows needs gradient buckets that hold "
                                "a block's MLP weights (" +
                                std::to_string(sum) + " parameters; the buckets hold " +
                                std::to_string(capacity) +
                                "): use larger buckets or mlp_tile_rows = 0");
  }
  ops.erase(ops.begin(), ops.begin() + static_cast<ptrdiff_t>(n));
  ops.insert(ops.begin(), GradOp{lo, sum, -1, 0});
  return Status::Ok();
}

}  // namespace

Status TransformerModel::PlanPieces(uint64_t capacity) {
  if (capacity == pieces_.capacity) return Status::Ok();
  if (capacity == 0) return InvalidArgumentError("transformer: gradient piece capacity 0");
  Pieces p;
  p.capacity = capacity;
  const ModelConfig& c = layout_.config;
  const auto C = static_cast<uint64_t>(c.d_model);
  // A tensor's size from its unit offset.
  auto count = [&](int unit, int64_t offset) -> int64_t {
    if (offset < 0) return 0;
    const TensorSlot* slot = nullptr;
    for (const TensorSlot& t : layout_.tensors[unit]) {
      if (t.offset == offset) slot = &t;
    }
    return slot != nullptr ? slot->tensor.num_elements : 0;
  };
  // Blocks: every block has the same layout, so one plan serves all.
  const int layer = layout_.layer_unit(0);
  if (layout_.num_layers() > 0) {
    model_internal::Dims d = model_internal::MakeDims(c, 1, 1);
    d.mlp_rows = shape_.mlp_tile_rows;
    for (const auto& [w, b] : model_internal::BlockGradOrder(d, layout_.layer)) {
      p.layer_ops.push_back(GradOp{w, count(layer, w), b, count(layer, b)});
    }
    if (shape_.mlp_tile_rows > 0) {
      TF_RETURN_IF_ERROR(MergeMlpOps(c, d, layout_.layer, capacity, p.layer_ops));
    }
    TF_ASSIGN_OR_RETURN(
        p.layer, model_internal::PlanGradPieces(
                     layout_.units[layer].name,
                     static_cast<int64_t>(layout_.units[layer].num_params), p.layer_ops, capacity));
  }
  const int head = layout_.head_unit(), emb = layout_.embedding_unit();
  p.head_whole = layout_.units[head].num_params <= capacity;
  p.embedding_whole = layout_.units[emb].num_params <= capacity;
  p.head_norm = GradOp{layout_.head.norm_w, count(head, layout_.head.norm_w), layout_.head.norm_b,
                       count(head, layout_.head.norm_b)};
  const uint64_t norm = static_cast<uint64_t>(p.head_norm.end() - p.head_norm.begin());
  const uint64_t wpe =
      layout_.embedding.wpe >= 0 ? layout_.units[emb].num_params - layout_.embedding.wpe : 0;
  p.vocab_slice_rows =
      static_cast<int64_t>(std::min<uint64_t>(capacity / C, static_cast<uint64_t>(c.vocab_size)));
  const bool tied = layout_.head.lm_head < 0;
  const bool slices = !p.embedding_whole || (!tied && !p.head_whole);
  if ((slices && p.vocab_slice_rows < 1) || (!p.head_whole && norm > capacity) ||
      (!p.embedding_whole && wpe > capacity)) {
    return InvalidArgumentError("transformer '" + c.name + "': gradient buckets of " +
                                std::to_string(capacity) +
                                " parameters cannot hold one vocabulary row (" + std::to_string(C) +
                                "), the final norm or the position embeddings: use larger buckets");
  }
  if (p.head_norm.begin() != 0 ||
      (p.head_norm.b >= 0 && p.head_norm.b != p.head_norm.w + p.head_norm.w_count)) {
    return InternalError("transformer: the head's unit does not start with its norm");
  }
  pieces_ = std::move(p);
  return Status::Ok();
}

}  // namespace tierflow

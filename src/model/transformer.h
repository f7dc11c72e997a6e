// The GPT-2 and Llama transformers as engine Trainables: forward and backward
// of a decoder-only language model, enqueued on the compute stream through the
// training ops (src/kernels) and Gemm, so the same code runs on the CPU device
// and on CUDA.
//
// Numerics: activations and activation gradients are stored in the weights
// dtype (bf16/fp16/fp32), every op computes in fp32, norm/attention statistics
// are fp32, parameter gradients are fp32 and accumulated ("+=") into the
// engine's buckets, and the loss is the fused softmax cross-entropy's fp32
// mean over non-ignored targets. The loss gradient is scaled by dloss_scale.
//
// Activation checkpointing keeps only each block's input (the residual stream
// entering it); backward recomputes the block's forward into one shared set of
// buffers just before its backward. The CPU ops are deterministic, so the
// gradients are bit-identical with checkpointing on or off.
//
// The loss is the mean over all non-ignored targets of the micro-batch (each
// head chunk's mean weighted by its share of the valid targets, counted on
// the host; an all-ignored micro-batch has loss 0 and zero gradients).
//
// Gradient buckets (UnitAccess): head first, then blocks last to first, then
// the embeddings, each BeginGrads just before and EndGrads right after the
// unit's backward. With tied embeddings the wte bucket (unit 0) is begun
// before the head backward and ended after the embedding backward.
//
// Units larger than a bucket (GradPieceCapacity) come in pieces
// (model/grad_pieces.h). A block is cut between its tensors' gradients, in
// the order backward writes them. The (V, C) LM head and wte are cut into
// vocabulary slices: the head's row chunks then compute only the loss, each
// row's log-sum-exp and the input gradient, and a second pass per slice
// recomputes that slice's logits (2 N V_s C more FLOPs in all: about a third
// of the head's cost) for its weight gradient. A tied wte's slices are
// streamed at the end, each with the head's and the embedding's shares. The
// result matches the whole-unit path within rounding (its sums are ordered
// differently) and is deterministic.
//
// Thread safety: one ForwardBackward at a time (the engine's contract).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/trainable.h"
#include "io/hf_checkpoint.h"
#include "model/grad_pieces.h"
#include "model/param_layout.h"
#include "tierflow/device.h"
#include "tierflow/dtype.h"
#include "tierflow/model_config.h"

namespace tierflow {

namespace model_internal {
struct Dims;
class CheckpointOffload;
}  // namespace model_internal

// The activation shape the model allocates for.
struct TrainShape {
  int batch = 1;     // B: sequences per micro-batch (a micro-batch may have fewer)
  int seq_len = 64;  // T: tokens per sequence (a micro-batch may have fewer);
                     //    REQUIRES <= config.max_seq_len
  bool checkpoint_activations = false;  // recompute each block in backward. Default: off
  DType dtype = DType::kBF16;  // weights and activations; must equal the engine's weights dtype
  // The head (logits, loss, their gradients) runs over row chunks of at most
  // this many logits and at least head_chunk_min_rows rows (HeadChunkRows in
  // tierflow/model_config.h), so the (N, V) logits never exist at once
  // (Llama-3's V = 128256 at N = 4096 rows would be 1 GiB in bf16) and each
  // chunk's weight-gradient GEMM has k >= 1024. Defaults: 16Mi logits, 1024
  // rows (250 MiB of bf16 logits at V = 128256). Tests lower both.
  int64_t head_chunk_logits = kHeadChunkLogits;
  int64_t head_chunk_min_rows = kHeadChunkMinRows;
  // A rope_scaling type other than "linear" and "llama3" (e.g. "yarn",
  // "dynamic") is not applied by the RoPE kernel, so such a model would not
  // compute what Hugging Face computes: Create fails unless this is set, and
  // then plain RoPE is used. Default: false.
  bool allow_unscaled_rope = false;
  // The checkpoints (each block's input) in pinned host memory, the device
  // holding a ring of three (model/checkpoint_offload.h). REQUIRES
  // checkpoint_activations. Bit-identical to keeping them. Default: off.
  bool offload_checkpoints = false;
  // The MLP's row tile: 0 = all N rows at once; R > 0 = the MLP (forward
  // and backward) runs over tiles of R rows, so its (N, F) hidden buffers
  // (fc, up, act and their gradients: 3.5 GiB each at T = 131072, F = 14336
  // in bf16) become (min(R, N), F), one set shared by all blocks. Backward
  // recomputes each tile's hidden activations from the saved norm2 output
  // (under checkpointing, the block's recompute skips the MLP instead, so
  // tiling adds no FLOPs there; without it, the gate/up or fc GEMMs run a
  // second time), and all MLP weight gradients of a block are
  // one gradient piece (the buckets must hold them). REQUIRES a multiple of
  // kGemmCpuKPanel (kernels/gemm.h): then on the CPU device the tiled run is
  // bit-identical to the untiled one (on CUDA, within rounding). Default: 0.
  int64_t mlp_tile_rows = 0;
};

// Where InitialWeights comes from.
struct TransformerInit {
  // A Hugging Face model directory (config.json + safetensors) whose tensors
  // are the initial weights; "" = seeded random init. Default: "".
  std::string weights_dir;
  // Seeded init (GPT-2 style): matrices and embeddings N(0, std), the residual
  // output projections (attention out, MLP down) N(0, std / sqrt(2 L)),
  // biases 0, norm weights 1. Default: seed 1234, std 0.02.
  uint64_t seed = 1234;
  float init_std = 0.02f;
  // With weights_dir: whether tensors of the checkpoint that the config does
  // not use (hf_model.h, UnusedHfTensors) are allowed; they are then left out
  // and listed by unused_checkpoint_tensors(). Default: false, an error.
  bool allow_unused_tensors = false;
};

class TransformerModel : public Trainable {
 public:
  // Validates the config and the shape (seq_len within max_seq_len and within
  // a Mistral sliding_window, which is not applied; a rope_scaling type
  // tierflow does not apply only with allow_unscaled_rope), opens the weights directory when one
  // is given (checking every tensor's presence and shape up front: an error
  // names the missing or mis-shaped tensor, or the tensors the config leaves
  // unused unless init.allow_unused_tensors), and allocates the activations on
  // `device` (OutOfMemory names the bytes). `device` must outlive the model.
  static StatusOr<std::unique_ptr<TransformerModel>> Create(Device& device,
                                                            const ModelConfig& config,
                                                            const TrainShape& shape,
                                                            const TransformerInit& init = {});
  ~TransformerModel() override;

  std::vector<UnitInfo> Units() const override { return layout_.units; }
  Status InitialWeights(int unit, float* out) override;
  // Embeddings, blocks 0..L-1, head, the embeddings again when tied (the
  // LM head is their wte; held to the end of backward), then blocks L-1..0
  // for backward (recomputation included). Embedding backward needs no weights.
  std::vector<int> WeightsSchedule() const override;
  // REQUIRES: batch.inputs and batch.targets (host, (batch, seq_len) each),
  // 1 <= batch.batch <= shape.batch, 1 <= batch.seq_len <= shape.seq_len.
  // Tokens must lie in [0, V); targets in [0, V) or -100 (ignored): checked
  // on the host, InvalidArgument naming the position otherwise.
  Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                         UnitAccess& access) override;
  StatusOr<float> LastLoss() override;

  const ParamLayout& layout() const { return layout_; }
  // The weights directory's tensors left out (init.allow_unused_tensors), sorted.
  const std::vector<std::string>& unused_checkpoint_tensors() const { return unused_tensors_; }
  const ModelConfig& config() const { return layout_.config; }
  const TrainShape& shape() const { return shape_; }
  // Device bytes of the activations (the whole allocation).
  uint64_t activation_bytes() const { return activation_bytes_; }
  // Pinned host bytes of the offloaded checkpoints (0 without the offload).
  uint64_t checkpoint_host_bytes() const;

  // Device activation bytes for a config and shape (what Create allocates).
  static uint64_t ActivationBytes(const ModelConfig& config, const TrainShape& shape);

  // The device activation buffers (defined in transformer.cc).
  struct Buffers;

 private:
  TransformerModel(Device& device, ParamLayout layout, const TrainShape& shape,
                   const TransformerInit& init);
  Status Allocate();
  template <typename T>
  Status Run(Stream& s, const MicroBatch& batch, float dloss_scale, UnitAccess& access);
  // Run's stages (transformer.cc), sharing one micro-batch's RunState.
  template <typename T>
  struct RunState;
  template <typename T>
  Status UploadBatch(Stream& s, RunState<T>& st);
  template <typename T>
  Status Forward(Stream& s, RunState<T>& st, UnitAccess& access);
  template <typename T>
  Status Head(Stream& s, RunState<T>& st, UnitAccess& access);
  template <typename T>
  Status HeadLossChunks(Stream& s, RunState<T>& st, float* d_lm_head);
  template <typename T>
  Status Backward(Stream& s, RunState<T>& st, UnitAccess& access);

  // How each unit's gradient is cut for a bucket capacity (grad_pieces.h).
  struct Pieces {
    uint64_t capacity = 0;                          // 0: not planned yet
    std::vector<model_internal::GradOp> layer_ops;  // one block's, backward order
    std::vector<model_internal::GradPiece> layer;   // the same for every block
    bool head_whole = true;                         // the head unit is one piece
    bool embedding_whole = true;                    // the embedding unit is one piece
    model_internal::GradOp head_norm;  // the final norm's weight (and bias), at the head's start
    int64_t vocab_slice_rows = 0;      // wte / lm_head rows per piece when sliced
  };
  Status PlanPieces(uint64_t capacity);
  struct HeadSlicing {
    int64_t total_valid = 0;  // valid targets of the micro-batch
    float dloss_scale = 1;
  };
  // Streams the (V, C) matrix at unit offset `offset` of `unit` in pieces of
  // vocab_slice_rows rows: each piece gets the LM head's share (the logits
  // of the slice recomputed, their gradient from the first pass's row_lse)
  // when `unit` holds the head's weights, and the embedding's share
  // (token rows in the slice) when `embedding`.
  template <typename T>
  Status WeightGradSlices(Stream& s, const model_internal::Dims& d, const MicroBatch& batch,
                          UnitAccess& access, int unit, int64_t offset, const T* lm_head,
                          const HeadSlicing& head, bool embedding);

  Device& device_;
  ParamLayout layout_;
  TrainShape shape_;
  TransformerInit init_;
  std::unique_ptr<HfCheckpoint> checkpoint_;  // set when init_.weights_dir is given
  std::vector<std::string> unused_tensors_;   // of checkpoint_, when allowed
  std::unique_ptr<Buffers> buf_;
  std::unique_ptr<model_internal::CheckpointOffload> offload_;  // with offload_checkpoints
  uint64_t activation_bytes_ = 0;
  std::vector<double> chunk_weights_;  // per head chunk: its share of the valid targets
  Pieces pieces_;
  bool ran_ = false;
};

}  // namespace tierflow

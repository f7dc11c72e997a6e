// The "tierflow convention": what each piece of training state costs, in
// bytes per parameter or per token, and which tier holds it. These constants
// and formulas are the single definition that both the planner and the
// engine use; docs/PLANNER.md explains each one and compares the convention
// with DeepSpeed's (16 / 18 / 20 bytes per parameter) and accelerate's.
//
// All functions are pure and reentrant.
#pragma once

#include <cstdint>
#include <string_view>

#include "tierflow/dtype.h"
#include "tierflow/model_config.h"
#include "tierflow/status.h"

namespace tierflow {

// ---- optimizer ----

enum class OptimizerKind : uint8_t {
  kAdamW,  // two fp32 moments (m, v)
  kLion,   // one fp32 moment
  kSgd,    // SGD with momentum: one fp32 moment
};
std::string_view OptimizerKindName(OptimizerKind kind);  // "adamw", "lion", "sgd"
StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name);
int OptimizerMomentCount(OptimizerKind kind);

// ---- bytes per parameter (host / NVMe) ----

inline constexpr uint64_t kMasterBytesPerParam = 4;          // fp32 master weights
inline constexpr uint64_t kMomentBytesPerParam = 4;          // each fp32 moment
inline constexpr uint64_t kGradAccumulatorBytesPerParam = 4; // fp32, pinned host
// Master weights plus moments: what moves between host and NVMe per
// parameter (12 for AdamW).
constexpr uint64_t OptimizerStateBytesPerParam(int num_moments) {
  return kMasterBytesPerParam + kMomentBytesPerParam * static_cast<uint64_t>(num_moments);
}

// ---- fixed sizes ----

// cuBLAS workspace per compute stream (the size cuBLAS uses on Hopper), and
// the number of streams that issue GEMMs (compute and recompute).
inline constexpr uint64_t kGemmWorkspaceBytesPerStream = 32ull << 20;
inline constexpr int kGemmStreams = 2;
// Device memory the CUDA context, cuBLAS handles and the allocator's
// fragmentation take when the capacity given is the card's total
// (--gpu-memory); a capacity detected through the Device API is already net.
inline constexpr uint64_t kCudaContextBytes = 768ull << 20;
// Host memory of the process beyond its tier buffers: code, thread stacks,
// oneTBB, dataset and tokenizer buffers, allocator slack.
inline constexpr uint64_t kHostProcessOverheadBytes = 1ull << 30;

// When the planner places the optimizer state itself, it fills host memory
// only up to this fraction, leaving the rest for the page cache and other
// processes: a plan at 99% of RAM is a host OOM waiting to happen.
inline constexpr double kHostAutoPlacementFraction = 0.9;

// NVMe state files: fixed-size blocks with a checksum each, one file per
// (tensor, state kind) with a header, data padded to the O_DIRECT alignment.
inline constexpr uint64_t kNvmeBlockBytes = 1ull << 20;
inline constexpr uint64_t kNvmeChecksumBytesPerBlock = 8;
inline constexpr uint64_t kNvmeFileHeaderBytes = 4096;
inline constexpr uint64_t kNvmeAlignmentBytes = 4096;

// Buffer counts. Default staging: 2 (one being filled while one is copied).
// Default NVMe I/O: 3 (read-ahead, in the optimizer, write-behind).
inline constexpr int kDefaultStagingBuffers = 2;
inline constexpr int kDefaultNvmeIoBuffers = 3;

// Optimizer sub-group size (parameters updated as one unit and moved to and
// from NVMe as one unit): P / 32 rounded up to kSubGroupQuantumParams,
// clamped to [kSubGroupQuantumParams, kMaxDefaultSubGroupParams] and to P.
inline constexpr int64_t kSubGroupQuantumParams = 1 << 16;
inline constexpr int64_t kMaxDefaultSubGroupParams = 1 << 25;
int64_t DefaultSubGroupParams(int64_t num_params);

// ---- activations on the device ----

// Activation memory of one micro-batch (B sequences of T tokens), in bytes.
// See docs/PLANNER.md for the derivation: the tensors each op saves for
// backward, in the activation dtype (= the weight dtype), plus fp32 norm
// statistics. The engine's forward/backward must stay within these.
struct ActivationBytes {
  uint64_t inputs = 0;          // token ids and targets, int32: B*T*8
  uint64_t stored_layers = 0;   // what L blocks keep until their backward
  uint64_t final_norm = 0;      // final norm input and output + stats
  uint64_t recompute_layer = 0; // with checkpointing: one block's full set, rebuilt in backward
  uint64_t gradients = 0;       // activation-gradient working set of one block's backward
  uint64_t logits = 0;          // fp32 logits (dlogits in place) + a 16-bit dlogits copy
  // Peak = inputs + stored_layers + final_norm +
  //        max(logits, recompute_layer + gradients).
  uint64_t peak() const;
};

struct ActivationOptions {
  int64_t micro_batch = 1;      // B
  int64_t seq_len = 0;          // T
  DType dtype = DType::kBF16;   // activation dtype
  bool checkpointing = true;    // keep only each block's input
  // The attention keeps its softmax probabilities (B, H, T, T) for backward,
  // as a plain kernel does; false = a fused (flash) kernel that keeps only
  // the log-sum-exp (B, H, T) in fp32. Default: true.
  bool attention_saves_probabilities = true;
};

// Elements per token one block keeps for backward without checkpointing
// (excluding the attention probabilities, which scale with T):
//   4C + (H + 2KV)D + HD + m*F,  m = 2 (GELU: pre-activation and output)
//   or 3 (SwiGLU: gate, up, product). The 4C are the block input, the first
//   norm's output, the residual after attention and the second norm's output.
int64_t LayerSavedElementsPerToken(const ModelConfig& model);

ActivationBytes ComputeActivationBytes(const ModelConfig& model, const ActivationOptions& options);

}  // namespace tierflow

// The "tierflow convention": what each piece of training state costs, in
// bytes per parameter or per token, and which tier holds it. It describes the
// engine as built: the OffloadEngine's buffers (src/engine/offload_engine.cc),
// its state tiers and swap files (offload/), and the transformer's activation
// arena (src/model/transformer.cc). docs/PLANNER.md explains each component
// and compares the convention with DeepSpeed's (16 / 18 / 20 bytes per
// parameter) and accelerate's.
//
// The defaults below must equal EngineOptions' (src/engine/engine_options.h);
// the planner does not depend on the engine, so they are stated here and the
// engine can take them from here.
//
// All functions are pure and reentrant.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/checked_math.h"
#include "tierflow/dtype.h"
#include "tierflow/model_config.h"
#include "tierflow/status.h"
#include "tierflow/sub_group_rule.h"

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

inline constexpr uint64_t kMasterBytesPerParam = 4;  // fp32 master weights
inline constexpr uint64_t kMomentBytesPerParam = 4;  // each fp32 moment
// fp32, pageable host, with several micro-batches per step (one micro-batch:
// the transfer dtype's size, pinned: its gradients land there).
inline constexpr uint64_t kGradAccumulatorBytesPerParam = 4;
// Device gradient buckets: fp32. What crosses PCIe (each bucket's device
// cast and its pinned staging) is in the gradient transfer dtype
// (tierflow/grad_transfer.h): 2 B/param by default with 16-bit weights.
inline constexpr uint64_t kGradBucketBytesPerParam = 4;
// Master weights plus moments: what moves between host and NVMe per
// parameter (12 for AdamW).
constexpr uint64_t OptimizerStateBytesPerParam(int num_moments) {
  return kMasterBytesPerParam + kMomentBytesPerParam * static_cast<uint64_t>(num_moments);
}

// ---- the engine's defaults (EngineOptions) ----

inline constexpr int64_t kDefaultSubGroupParams = int64_t{4} << 20;  // sub_group_params
inline constexpr int kDefaultBufferCount = 4;  // weight staging slots = NVMe I/O slots
inline constexpr int kDefaultGradBuckets = 3;  // device gradient buckets (+ pinned staging each)
// Pinned sub-group gradient slots when the gradients wait on NVMe
// (grad_spill_slots, GradOffload::kNvme): each the largest sub-group's
// gradient (fp32 with several micro-batches, else the transfer dtype),
// rounded up to 4 KiB.
inline constexpr int kDefaultGradSpillSlots = 4;
// The speculation budget (speculation_params) is not a constant: the plan
// derives it from free host memory (plan/speculation_budget.h).

// ---- fixed sizes ----

// cuBLAS workspace per stream that issues GEMMs, and how many such streams.
inline constexpr uint64_t kGemmWorkspaceBytesPerStream = 32ull << 20;
inline constexpr int kGemmStreams = 1;
// Device memory the CUDA context, cuBLAS handles and the allocator's
// fragmentation take when the capacity given is the card's total
// (--gpu-memory); a capacity detected through the Device API is already net.
inline constexpr uint64_t kCudaContextBytes = 768ull << 20;
// The CUDA allocator hands out large blocks in 2 MiB granules, so each
// device allocation may waste up to that much (fragmentation headroom). The
// engine and model allocate once, at start-up: the working weights, the
// activations, the gradient statistics and their scratch, and two buffers
// per gradient bucket (fp32 and its transfer cast).
inline constexpr uint64_t kDeviceAllocationGranuleBytes = 2ull << 20;
inline constexpr int kFixedDeviceAllocations = 4;
// Host memory of the process beyond its tier buffers: code, thread stacks,
// oneTBB, tokenizer tables, allocator slack (the dataset is counted apart).
inline constexpr uint64_t kHostProcessOverheadBytes = 1ull << 30;
// When the planner places the optimizer state itself, it fills host memory
// only up to this fraction, leaving the rest for the page cache and other
// processes: a plan at 99% of RAM is a host OOM waiting to happen. 85%, the
// device's margin too (kDeviceTargetFraction): a 64 GiB machine keeps 9.6 GiB.
inline constexpr double kHostAutoPlacementFraction = 0.85;
// The planner sizes gradient buckets to keep the device at or below this
// fraction of its capacity when it can: room for what no plan sees (other
// processes on the GPU, driver and library growth).
inline constexpr double kDeviceTargetFraction = 0.85;

// NVMe swap files (offload/swap_format.h): one file per directory; a header
// with a tensor table and two copies of a block table (8 bytes per logical
// block), padded together to the first 1 MiB boundary, then the data in
// fixed-size blocks. Each sub-group's state is one
// tensor (two with the overlapped pipeline: the previous copy survives a
// failed or rolled-back update), rounded up to whole blocks. Every
// directory keeps (buffer_count + 1) x the largest tensor of spare blocks
// so each I/O slot can land on fresh blocks. The block is the NVMe tier's
// block size (PlanInput::nvme_block_bytes); this is its default.
inline constexpr uint64_t kNvmeBlockBytes = 1ull << 20;
inline constexpr uint64_t kNvmeBlockTableBytesPerBlock = 8;
inline constexpr uint64_t kNvmeHeaderBytesPerTensor = 64;  // name and geometry (estimate)
inline constexpr uint64_t kNvmeHeaderFixedBytes = 256;
inline constexpr uint64_t kDirectIoAlignmentBytes = 4096;

// ---- activations on the device ----

// The MLP's row tiles are multiples of this (the CPU GEMM's k-panel,
// kGemmCpuKPanel, which makes them bit-identical to the untiled MLP;
// plan_vs_engine_test holds them equal). The tile --offload-activations auto
// takes when only a tiled MLP fits is kAutoMlpTileRows.
inline constexpr int64_t kMlpTileQuantum = 256;
inline constexpr int64_t kAutoMlpTileRows = 4096;

// Device slots of the activation checkpoints' ring when they live in host
// memory (the model's CheckpointOffload::kSlots; plan_vs_engine_test holds
// them equal): block l's input, its recompute's output, the next prefetch.
inline constexpr int kCheckpointDeviceSlots = 3;

// Bytes of the transformer's activation arena for micro-batches of B
// sequences of T tokens (N = B*T), as TransformerModel allocates it: one
// allocation, every buffer rounded up to 256 bytes, activations in the
// weights dtype, norm and attention statistics in fp32. See docs/PLANNER.md.
struct ActivationBytes {
  uint64_t residual = 0;    // (L+1) residual-stream tensors (N, C): block inputs and the output
  uint64_t blocks = 0;      // saved block activations: L sets, or 1 with checkpointing
  uint64_t final_norm = 0;  // (N, C) + statistics
  uint64_t logits = 0;  // one row chunk of (N, V) logits, a loss per chunk, per-row losses and lse
  uint64_t inputs = 0;  // token ids, targets, packed positions and sample starts, int32
  uint64_t gradients = 0;  // activation-gradient scratch of one block's backward
  // Pinned host memory, not the device's: the offloaded checkpoints
  // (residuals 0..L-kCheckpointDeviceSlots, (N, C) each). Not in total().
  uint64_t host_checkpoints = 0;
  // Bytes each micro-batch moves down in forward and up in backward (the same).
  uint64_t checkpoint_transfer = 0;
  // Saturates at 2^64 - 1 (as every count here does) instead of wrapping.
  uint64_t total() const {
    return SaturatingSum(residual, blocks, final_norm, logits, inputs, gradients);
  }
};

struct ActivationOptions {
  int64_t micro_batch = 1;     // B
  int64_t seq_len = 0;         // T
  DType dtype = DType::kBF16;  // activation dtype (= the weights dtype)
  bool checkpointing = true;   // keep only block inputs; recompute into one shared set
  // The checkpoints in pinned host memory, a ring of kCheckpointDeviceSlots
  // on the device. REQUIRES checkpointing.
  bool offload_checkpoints = false;
  // The MLP's row tile (TrainShape::mlp_tile_rows): 0 = untiled; R > 0 = the
  // MLP's (N, F) buffers are one (min(R, N), F) set shared by the blocks,
  // and its gradient scratch (min(R, N), F).
  int64_t mlp_tile_rows = 0;
};

// Bytes of one block's saved set (excluding its input, which is a residual
// tensor): norm outputs, q/k/v, attention output, attention log-sum-exp
// (fp32, H per token: the attention keeps no (T, T) probabilities), the
// residual after attention, the MLP hidden (2F GELU / 3F SwiGLU) and the
// norm statistics.
uint64_t BlockActivationBytes(const ModelConfig& model, int64_t tokens, DType dtype);
// The MLP hidden part of that for `rows` rows: (2 GELU / 3 SwiGLU) x (rows, F).
uint64_t MlpActivationBytes(const ModelConfig& model, int64_t rows, DType dtype);

ActivationBytes ComputeActivationBytes(const ModelConfig& model, const ActivationOptions& options);

// ---- sub-groups (the engine's MakeSubGroups) ----

// The engine cuts each parameter unit (ParameterGroups: embeddings, each
// block, head) into slices of at most sub_group_params; a slice never spans
// two units. With an NVMe ratio r the sub-groups whose first parameter is at
// or beyond llround((1 - r) * P) live on NVMe.
struct SubGroupSummary {
  int64_t params = 0;  // parameters whose state this layout holds (one rank's parts)
  int64_t num_sub_groups = 0;
  int64_t max_unit_params = 0;   // the largest unit, whole (sizes gradient buckets)
  int64_t max_group_params = 0;  // the largest sub-group (sizes weight staging)
  int64_t nvme_params = 0;       // parameters in NVMe sub-groups
  int64_t nvme_sub_groups = 0;
  int64_t max_nvme_group_params = 0;  // sizes the NVMe I/O slots
  uint64_t nvme_block_bytes = 0;      // state bytes of NVMe sub-groups, each rounded to blocks
};
// `block_bytes`: the swap files' block, which each NVMe sub-group's state is
// rounded up to (a multiple of 4096). With `ranks` > 1 (data parallelism)
// the layout is rank 0's: every unit's first part (RankPartParams), the
// largest any rank holds, so a plan sized by it holds for every rank.
SubGroupSummary SummarizeSubGroups(const ModelConfig& model, int64_t sub_group_params,
                                   double nvme_ratio, uint64_t state_bytes_per_param,
                                   uint64_t block_bytes = kNvmeBlockBytes, int ranks = 1);
// The same under either rule (tierflow/sub_group_rule.h); slices as above,
// DeepSpeed's whole tensors from ParameterGroups' tensor list (a part cuts
// the tensors it ends in, as the engine's MakeSubGroupsOfParts does).
SubGroupSummary SummarizeSubGroups(const ModelConfig& model, SubGroupRule rule, double nvme_ratio,
                                   uint64_t state_bytes_per_param,
                                   uint64_t block_bytes = kNvmeBlockBytes, int ranks = 1);

// ---- data parallelism ----

// The engine cuts each unit into one part per rank at the gradient norm's
// chunks (comm::Partition::Even with optim's kGradStatsChunkElems, which a
// test holds equal to this): ceil(chunks / ranks) chunks each, the last
// rank taking what remains. Rank 0's part, the largest: min(n, that).
inline constexpr int64_t kRankPartAlignParams = 16384;
int64_t RankPartParams(int64_t unit_params, int ranks);

// Gradient bucket sizes, in parameters (EngineOptions::grad_bucket_params),
// largest first. Buckets as large as the largest unit stream every unit
// whole. Smaller ones cut the (V, C) embedding and LM head into vocabulary
// slices, which costs the head a second pass over its logits (2 N V C
// FLOPs), and below a block's size they cut blocks between tensors, which
// costs nothing. The smallest is the largest gradient one kernel writes.
struct GradBucketSizes {
  int64_t whole_units = 0;  // the largest unit
  int64_t blocks = 0;       // the largest unit once the vocabulary matrices are sliced
  int64_t tensors = 0;      // the largest weight (with its bias) outside those matrices
  // A block's MLP weights and biases: one gradient piece when the MLP runs
  // in row tiles (every tile adds to all of them), so the least bucket then.
  int64_t mlp = 0;
};
GradBucketSizes GradBucketSizesOf(const ModelConfig& model);

}  // namespace tierflow

// The memory-budget planner: given a model, a training setup and the
// hardware, what every tier must hold, whether it fits (and if not, which
// constraint binds and what to change), where the optimizer state goes, and
// how long a step takes. `tierflow plan` prints it; `tierflow train` places
// state by it and refuses an infeasible run before allocating anything.
//
// Pure functions of their inputs: no I/O, no globals (detection of the
// hardware lives in hardware_detect.h, hardware profiles in
// hardware_profile.h). Byte counts follow the tierflow convention in
// plan/memory_model.h and docs/PLANNER.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/activation_offload.h"
#include "common/grad_offload.h"
#include "plan/memory_model.h"
#include "tierflow/dtype.h"
#include "tierflow/model_config.h"
#include "tierflow/param_offload.h"
#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow {

// The engine's two step pipelines (EngineOptions::pipeline).
enum class PipelineKind : uint8_t {
  kOverlapped,   // the optimizer speculates during backward (the engine's default)
  kSynchronous,  // the optimizer starts when the whole gradient is in
};

struct PlanInput {
  ModelConfig model;
  int64_t micro_batch = 1;     // sequences per micro-batch (B). REQUIRES >= 1
  int64_t seq_len = 0;         // tokens per sequence (T). REQUIRES 1..kMaxPlanSeqLen (past
                               // the model's positions: the verdict says so)
  int64_t grad_accum = 1;      // micro-batches per optimizer step. REQUIRES >= 1
  DType dtype = DType::kBF16;  // working weights and activations on the device
  // The dtype gradients cross PCIe in (tierflow/grad_transfer.h); unset: the
  // default for `dtype` (itself when 16-bit, fp32 for fp32).
  std::optional<DType> grad_transfer_dtype;
  bool checkpointing = true;  // activation checkpointing (keep block inputs, recompute)
  ActivationOffload offload_activations = ActivationOffload::kAuto;
  // Where the step's gradients wait for its clip/overflow decision
  // (EngineOptions::grad_offload): kHost, the whole model's in host memory;
  // kNvme, grad_spill_slots pinned sub-group slots and the rest on the drives
  // beside the state (needs the state wholly on NVMe, one rank, and NVMe);
  // kAuto, on the host while the host plan fits with them there, else on
  // the drives where that is possible (moving the state wholly to NVMe).
  GradOffload offload_gradients = GradOffload::kAuto;
  int grad_spill_slots = kDefaultGradSpillSlots;  // kNvme's pinned slots. REQUIRES >= 2
  // The MLP's row tile (TrainShape::mlp_tile_rows): 0 untiled; R > 0, a
  // multiple of kMlpTileQuantum; unset: the planner's (untiled while the run
  // fits so, else kAutoMlpTileRows). Tiled, the gradient buckets hold at
  // least a block's MLP weights (GradBucketSizes::mlp).
  std::optional<int64_t> mlp_tile_rows;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  OffloadPlacement offload = OffloadPlacement::kAuto;
  // Fraction in [0, 1] of the parameters whose optimizer state is on NVMe
  // (the engine's nvme_ratio: the last sub-groups). < 0 = not given: kAuto
  // picks the smallest that fits the host, kHost means 0, kNvme means 1.
  // Given with kHost it must be 0.
  double nvme_ratio = -1;
  // How units are cut into sub-groups (tierflow/sub_group_rule.h): slices of
  // at most sub_group_params (>= 1), or DeepSpeed's whole tensors of at
  // least sub_group_params (>= 0).
  int64_t sub_group_params = kDefaultSubGroupParams;
  SubGroupCut sub_group_cut = SubGroupCut::kSlices;
  int buffer_count = kDefaultBufferCount;  // weight staging slots and NVMe I/O slots. REQUIRES >= 2
  int grad_buckets = kDefaultGradBuckets;  // REQUIRES >= 2
  // Parameters per gradient bucket (EngineOptions::grad_bucket_params).
  // Unset: the planner picks from GradBucketSizesOf the largest that keeps
  // the device at or below kDeviceTargetFraction, else the smallest. Given:
  // REQUIRES >= GradBucketSizesOf(model).tensors.
  std::optional<int64_t> grad_bucket_params;
  PipelineKind pipeline = PipelineKind::kOverlapped;
  // kOverlapped: parameters updated speculatively per step (the engine's
  // speculation_params). Unset: as many as the host memory left free by
  // everything else allows, filling it up to kHostAutoPlacementFraction
  // (plan/speculation_budget.h); the state's placement is chosen first, so
  // speculation never pushes state to NVMe.
  std::optional<int64_t> speculation_params;
  // Host bytes of the tokenized dataset the run holds (its tokens and
  // shuffled order: DataLoader::MemoryBytes); 0 when not known (plan alone).
  uint64_t dataset_bytes = 0;
  // The host tier's optimizer state page-locked (pin_memory): it counts as
  // pinned memory.
  bool lock_host_state = false;
  int nvme_directories = 1;  // swap directories (one per drive); each keeps spare blocks
  // The swap files' block (the NVMe tier's block size): each sub-group's
  // state is rounded up to whole blocks. A multiple of 4096. Default: 1 MiB.
  uint64_t nvme_block_bytes = kNvmeBlockBytes;
  // Parameter offload (EngineOptions::params): kAuto streams weights only
  // when the all-resident device does not fit, from host when the host can
  // hold the streamed copy, else from NVMe; kNone keeps every unit resident
  // (infeasible if that does not fit); kHost / kNvme stream from there
  // (the planner still picks which units, at least one).
  ParamOffload param_offload = ParamOffload::kAuto;
  // Device slots of the streamed units' ring (>= 2); unset: the planner's choice.
  std::optional<int> param_slots;
  // Data parallelism (EngineOptions::comm): gpus_per_node x nodes ranks,
  // one GPU each. Every rank holds the whole model on its device, runs
  // grad_accum micro-batches per step (sequences per step = micro_batch x
  // grad_accum x ranks, DeepSpeed's rule) and owns the optimizer state of
  // its part of every unit. The Hardware's host memory, NVMe, cores and
  // host rates are one node's, shared by its ranks; the device's are one
  // GPU's. gpus_per_pcie_link GPUs share one PCIe link to the host (a
  // switch), dividing its bandwidth: 1..gpus_per_node.
  int gpus_per_node = 1;
  int nodes = 1;
  int gpus_per_pcie_link = 1;
  int ranks() const { return gpus_per_node * nodes; }
  // With several ranks (or one: the data-parallel path over a world of
  // one, how one GPU checks it), the gradient summed and the resident weights
  // gathered on the devices (EngineOptions::device_comm: NCCL on GPUs)
  // instead of on the host: only each rank's part of the sum, fp32, crosses
  // PCIe, once a step; nothing lands whole on the host; the device holds
  // that part (the step's running sum with grad_accum > 1, else a bucket's)
  // and, on a GPU, the collective's scratch.
  bool device_collectives = false;
};

// Rates the step-time prediction uses. Defaults come from
// DefaultBandwidths (hardware_profile.h); a `tierflow bench` profile
// replaces them.
struct Bandwidths {
  double h2d_gb_per_second = 0;          // weights to the device (pinned)
  double d2h_gb_per_second = 0;          // gradients to the host (pinned)
  double host_memory_gb_per_second = 0;  // host DRAM streaming (gradient accumulation)
  double adam_params_per_second = 0;     // CPU optimizer throughput, all cores
  double nvme_read_gb_per_second = 0;    // optimizer state reads, all NVMe paths
  double nvme_write_gb_per_second = 0;   // optimizer state writes
  double device_tflops = 0;              // dense 16-bit GEMM peak of the device
  double device_efficiency = 0;          // fraction of device_tflops a whole fwd+bwd reaches
  // Collectives between data-parallel ranks on the host path (MPI): bus
  // bandwidth as nccl-tests defines it (a collective of S bytes over n
  // ranks takes S (n - 1) / n / busbw), the slower of reduce-scatter and
  // all-gather, within one node and across nodes. `tierflow bench comm
  // --profile` measures them.
  double intra_node_busbw_gb_per_second = 0;
  double inter_node_busbw_gb_per_second = 0;
  std::string source;         // "defaults", "profile bench.json", ... (for humans)
  int64_t measured_unix = 0;  // when the profile's benches ran (Unix seconds); 0: unknown
};

struct Hardware {
  bool device_is_gpu = false;        // false: the emulated CPU device
  std::string device_description;    // for humans
  uint64_t device_memory_bytes = 0;  // capacity of the device tier
  // Taken off the device before tensors (kCudaContextBytes when the capacity
  // is the card's total; 0 when it was measured free through the Device API).
  uint64_t device_reserved_bytes = 0;
  // The emulated CPU device's memory is host RAM: its use counts on the host tier too.
  bool device_memory_is_host_memory = false;
  uint64_t host_memory_bytes = 0;    // usable host RAM (MemAvailable, cgroup limit)
  uint64_t nvme_capacity_bytes = 0;  // free bytes over all NVMe paths
  int cores = 1;
  Bandwidths bandwidths;
};

// One line of a tier's table.
struct PlanComponent {
  std::string name;  // JSON key: "weights", "gradient_buckets", ...
  uint64_t bytes = 0;
  std::string note;  // how it was computed, for humans
};

struct TierPlan {
  std::string name;  // "device", "host", "nvme"
  uint64_t capacity_bytes = 0;
  std::vector<PlanComponent> components;
  uint64_t total_bytes() const;
  uint64_t bytes_of(std::string_view component) const;  // 0 when absent
};

// Where the 16-bit working weights live, in EngineOptions::params' terms.
struct ParamPlacement {
  ParamOffload where = ParamOffload::kNone;  // resolved: kNone, kHost or kNvme
  // Units whose weights are streamed, as indices into the model's units in
  // forward order (0 embeddings, 1..L the blocks, L+1 the head), ascending.
  std::vector<int> streamed_units;
  int64_t resident_params = 0;  // weights kept on the device
  int64_t streamed_params = 0;  // weights in the host or NVMe copy
  int64_t slot_params = 0;      // one device slot: the largest streamed unit
  int device_slots = 0;         // EngineOptions::params.device_slots (0 when nothing streams)
  int prefetch_depth = 0;       // EngineOptions::params.prefetch_depth
  int nvme_staging = 0;         // EngineOptions::params.nvme_staging (kNvme)
  // Bytes uploaded into the slots per micro-batch (each streamed unit as
  // often as the transformer fetches it: a block twice, forward and backward).
  uint64_t fetch_bytes_per_micro_batch = 0;
  bool chosen_by_planner = false;  // false when the user forced kHost / kNvme
};

// Where the engine puts the optimizer state, in EngineOptions' terms.
struct Placement {
  double nvme_ratio = 0;          // EngineOptions::nvme_ratio (0 = offload "host")
  int64_t host_state_params = 0;  // parameters whose master + moments are in host RAM
  int64_t nvme_state_params = 0;  // ... on NVMe (whole sub-groups at the model's end)
  int64_t sub_group_params = 0;
  SubGroupCut sub_group_cut = SubGroupCut::kSlices;
  int64_t num_sub_groups = 0;
  int64_t nvme_sub_groups = 0;
  int buffer_count = 0;
  int grad_buckets = 0;
  // EngineOptions::grad_bucket_params, and whether the (V, C) matrices are
  // cut into vocabulary slices (the head's second pass over its logits).
  int64_t grad_bucket_params = 0;
  bool vocab_sliced = false;
  // Speculation budget (EngineOptions::speculation_params) and where it came
  // from: "free host memory", "input", or "none: synchronous pipeline" (0).
  int64_t speculation_params = 0;
  std::string speculation_from;
  bool chosen_by_planner = false;  // false when the user fixed the placement
  ParamPlacement params;           // the working weights' placement
  // The activation checkpoints: kNone (on the device) or kHost, as run;
  // whether the planner chose it (--offload-activations auto).
  ActivationOffload activations = ActivationOffload::kNone;
  bool activations_chosen = false;
  // Where the step's gradients wait (EngineOptions::grad_offload): kHost or
  // kNvme, as run; whether the planner chose it (--offload-gradients auto);
  // EngineOptions::grad_spill_slots (kNvme).
  GradOffload gradients = GradOffload::kHost;
  bool gradients_chosen = false;
  int grad_spill_slots = 0;
  int64_t mlp_tile_rows = 0;         // TrainShape::mlp_tile_rows: 0 untiled
  std::string where() const;         // "host", "nvme" or "split"
  OffloadPlacement offload() const;  // EngineOptions::offload: kHost or kNvme
};

struct StageTime {
  std::string name;    // JSON key: "compute", "d2h_gradients", ...
  double seconds = 0;  // per optimizer step
  std::string note;
};

struct Plan {
  std::string model_name;
  ModelFamily family = ModelFamily::kLlama;
  int64_t params = 0;
  int64_t tokens_per_step = 0;
  uint64_t state_bytes_per_param = 0;        // master + moments (12 for AdamW)
  DType grad_transfer_dtype = DType::kBF16;  // what gradients cross PCIe in

  TierPlan device, host, nvme;
  uint64_t pinned_bytes = 0;    // part of the host total that is page-locked
  ActivationBytes activations;  // as planned (checkpointing per input)
  SubGroupSummary sub_groups;   // the engine's layout under this placement
  uint64_t activations_with_checkpointing_bytes = 0;
  uint64_t activations_without_checkpointing_bytes = 0;

  bool feasible = false;
  // The tier with the highest use / capacity: the one that does not fit,
  // or, when all fit, the one that limits growth. "device", "host", "nvme".
  std::string binding_constraint;
  // One or two sentences: what fits, or what does not and what to change.
  std::string explanation;

  Placement placement;
  // What the gradients waiting for the step's decision cost, wherever they
  // are (placement.gradients): host bytes (the landing or accumulator, the
  // staging, the spill slots), bytes on the drives (the sub-groups'
  // gradient tensors and their spare blocks), and the NVMe traffic they add
  // to each step (0 on the host), which the nvme_io stage includes.
  struct Gradients {
    uint64_t host_bytes = 0;
    uint64_t nvme_bytes = 0;
    uint64_t nvme_write_bytes_per_step = 0;
    uint64_t nvme_read_bytes_per_step = 0;
    double nvme_seconds_per_step = 0;
  } gradients;
  std::vector<StageTime> stages;
  // When the update (optimizer, NVMe or H2D) is the slowest stage: the
  // micro-batches per step at which compute would be (0 when compute
  // already is, or when the per-micro-batch transfers outgrow compute so
  // that no accumulation can make it), that step's predicted time, and
  // the advice in words.
  struct ComputeBound {
    int64_t grad_accum = 0;
    int64_t tokens_per_step = 0;
    double step_seconds = 0;
    std::string advice;
  } compute_bound;
  double predicted_step_seconds = 0;  // with the engine's overlap
  double serial_step_seconds = 0;     // every stage one after another
  double flops_per_step = 0;          // over all ranks

  // Data parallelism (input.ranks() > 1). The tiers above are per GPU
  // (device) and per node (host, NVMe: the sum of its ranks').
  struct DataParallel {
    int ranks = 1, gpus_per_node = 1, nodes = 1;
    int64_t rank_params = 0;  // parameters whose state the largest rank owns
    // Per step: the gradient's reduce-scatters (one per micro-batch) and
    // the weights' all-gather, and over what they ran.
    double reduce_scatter_seconds = 0, all_gather_seconds = 0;
    std::string interconnect;
    // Tokens/s with 1, 2, 4, ... GPUs per node up to gpus_per_node (those
    // that divide it), the same nodes and global batch (fewer GPUs
    // accumulate more micro-batches), and what binds each.
    struct Point {
      int gpus_per_node = 0;
      bool feasible = false;
      double tokens_per_second = 0;
      double step_seconds = 0;
      std::string slowest;  // the stage the step waits on most
      double slowest_seconds = 0;
      std::string binding;  // the plan's binding tier ("device", "host", "nvme")
    };
    std::vector<Point> scaling;
    // Whether adding GPUs helps, and if not, what binds (host memory
    // bandwidth, PCIe, NVMe or the network), in words.
    std::string scaling_advice;
  } data_parallel;
};

// Upper bounds on the training setup ComputePlan accepts, far above any real
// run, so that with a valid ModelConfig (model_config.h's bounds) every byte
// count fits in 64 bits; the arithmetic saturates anyway.
inline constexpr int64_t kMaxPlanMicroBatch = int64_t{1} << 16;
inline constexpr int64_t kMaxPlanGradAccum = int64_t{1} << 16;
inline constexpr int64_t kMaxPlanParams = int64_t{1} << 40;  // sub-group, speculation sizes
inline constexpr int64_t kMaxPlanSlots = 1024;  // buffers, gradient buckets, NVMe directories
inline constexpr int kMaxPlanGpusPerNode = 64;
inline constexpr int kMaxPlanNodes = 4096;
inline constexpr int64_t kMaxPlanSeqLen = int64_t{1} << 24;  // tokens per sequence

// The plan. InvalidArgument when the input is inconsistent (the model config
// invalid or beyond its bounds, seq_len beyond the model's positions, ratio
// outside [0, 1] or contradicting the offload choice, sizes non-positive or
// beyond the bounds above). Aborted when cancellation is pending
// (common/cancel.h). An infeasible budget is not an error: the Plan says
// feasible = false and why. Byte counts saturate at 2^64 - 1, never wrap.
//
// --offload-activations auto plans with the checkpoints on the device, and
// keeps that plan when it is feasible and streams no weights. Otherwise it
// also plans with them in host memory and takes that one when it is
// feasible and the other is not, when it predicts a shorter step, or when
// neither fits and the device is what binds.
//
// --offload-gradients auto plans the gradients in host memory and keeps that
// plan when the host holds it; else, where GradSpillBlocker allows, plans
// them on NVMe (the optimizer state wholly there) and takes that one.
StatusOr<Plan> ComputePlan(const PlanInput& input, const Hardware& hardware);

// Why the engine cannot keep this run's gradients on NVMe
// (GradOffload::kNvme), in words; "" when it can: one process (no data
// parallelism, no device collectives), the optimizer state wholly on NVMe
// (offload not host, no ratio below 1) and an NVMe path with free space.
std::string GradSpillBlocker(const PlanInput& input, const Hardware& hardware);

// The activation sizing of a run (memory_model.h); offload_checkpoints for
// ActivationOffload::kHost.
ActivationOptions ActivationOptionsOf(const PlanInput& input);

// OK when the plan is feasible; otherwise OutOfMemory (device or host) or
// ResourceExhausted (NVMe) carrying the plan's explanation. What the engine
// returns before it allocates anything.
Status RequireFeasible(const Plan& plan);

// The largest model of the input's family that fits the hardware with the
// same training setup. Candidates are the family's presets and the input
// model, each at its own width and any depth up to max(its layers,
// d_model / kMinWidthPerLayer) (real models keep d_model / layers >= 32;
// deeper ones would be answers nobody trains), and never past
// kMaxModelLayers. params = 0 when nothing fits. Aborted on a pending
// cancellation (checked per candidate and per search step).
inline constexpr int64_t kMinWidthPerLayer = 32;
struct LargestModel {
  int64_t params = 0;
  std::string description;  // "llama-8b (preset)" or "llama-7b with 53 layers instead of 32"
  ModelConfig config;       // the model found (valid when params > 0)
};
StatusOr<LargestModel> LargestFittingModel(const PlanInput& input, const Hardware& hardware);

// The longest context (seq_len, 1..max(model.max_seq_len, input.seq_len), the rest of the setup
// as given) that fits, with the activation checkpoints on the device and in
// host memory; 0 when not even one token does (offloaded: also when
// checkpointing is off, which it needs).
struct LongestContext {
  int64_t on_device = 0;
  int64_t offloaded = 0;
};
StatusOr<LongestContext> LongestFittingContext(const PlanInput& input, const Hardware& hardware);

// The most layers in 1..max_layers with which input.model (its width
// unchanged) fits; 0 when even one layer does not. Feasibility is monotone
// in depth (every tier grows with it), so this is a binary search.
// max_layers is capped at kMaxModelLayers. Aborted on a pending cancellation.
StatusOr<int64_t> DeepestFittingLayers(const PlanInput& input, const Hardware& hardware,
                                       int64_t max_layers);

}  // namespace tierflow

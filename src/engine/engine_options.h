// Options of the OffloadEngine and the statistics it reports per step.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/grad_offload.h"
#include "engine/loss_scaler.h"
#include "offload/io_backend.h"
#include "optim/adam.h"
#include "tierflow/dtype.h"
#include "tierflow/nvme_io.h"
#include "tierflow/param_offload.h"
#include "tierflow/placement.h"
#include "tierflow/sub_group_rule.h"

namespace tierflow {

class TraceRecorder;
namespace comm {
class Communicator;
}

enum class Pipeline {
  // The CPU optimizer starts during backward, as gradients arrive, updating
  // sub-groups speculatively as if no clipping or overflow will happen. When
  // the global norm then says otherwise, the speculative updates are rolled
  // back and redone (counted in StepStats::rolled_back). Always equal to
  // kSynchronous, bit for bit.
  kOverlapped,
  // The optimizer starts when the whole gradient is in (then still pipelined:
  // NVMe read-ahead/write-behind, H2D per unit, next forward per unit).
  kSynchronous,
};

// Parameter offload (ZeRO-Infinity): which units' 16-bit working weights are
// not resident on the device. A streamed unit's weights live in pinned host
// memory (kHost) or on NVMe (kNvme, read through pinned staging), and are
// uploaded into a ring of device slots, each the size of the largest
// streamed unit, ahead of use: in the order of the model's
// Trainable::WeightsSchedule, `prefetch_depth` fetches ahead. Its updated
// weights go back to that copy, never to the device. Results are
// bit-identical to the all-resident run.
struct ParamStreaming {
  ParamOffload where = ParamOffload::kNone;  // kNone, or kHost / kNvme with units below
  std::vector<int> streamed_units;           // unit indices; empty with kNone
  int device_slots = 2;                      // >= 2
  int prefetch_depth = 1;                    // 1 .. device_slots - 1
  // kNvme: pinned staging buffers between the drive and the slots (each a
  // slot's size); reads run this many fetches ahead. >= 1. Default: 2.
  int nvme_staging = 2;
};

struct EngineOptions {
  DType weights_dtype = DType::kBF16;  // working weights on the device. Default: bf16
  AdamOptions adam;                    // Default: AdamW, lr 1e-3
  float clip_grad_norm = 0.0f;         // global-norm clipping; 0 = off. Default: 0
  LossScalerOptions loss_scaler;       // used when weights_dtype is fp16
  // The dtype each unit's fp32 gradient bucket is cast to on the device
  // before it crosses PCIe (tierflow/grad_transfer.h); the host accumulates
  // in fp32 either way. fp16 needs fp16 weights (their loss scale).
  // Default (unset): the weights dtype when 16-bit (2 B/param), fp32 with
  // fp32 weights.
  std::optional<DType> grad_transfer_dtype;
  // Where the step's gradients wait for the decision (common/grad_offload.h):
  // kHost (the whole model's, in host memory) or kNvme (grad_spill_slots
  // pinned sub-group buffers; each sub-group's gradient, fp32 when
  // accumulating, in the NVMe state store beside its state; with data
  // parallelism each rank's part of every unit's fp32 running sum). kNvme
  // needs offload kNvme with nvme_ratio 1, micro_batches_per_step >= 1, and
  // host collectives (no device_comm). kAuto is the planner's to resolve:
  // Init refuses it. Default: kHost.
  GradOffload grad_offload = GradOffload::kHost;
  int grad_spill_slots = 4;  // kNvme: pinned sub-group gradient slots (>= 2). Default: 4

  // Optimizer state: kHost or kNvme (kAuto is the planner's to resolve:
  // Init refuses it).
  OffloadPlacement offload = OffloadPlacement::kHost;
  // With offload kNvme: the fraction of sub-groups (by parameters, taken
  // from the model's end) whose state lives on NVMe; the rest stays on host.
  // Default: 1 (all on NVMe).
  double nvme_ratio = 1.0;
  std::vector<std::string> nvme_paths;  // one or more directories (one per drive)
  bool nvme_buffered = false;           // explicit buffered I/O (tmpfs); never a silent fallback
  std::string run_id;                   // names the swap set; "" = generated
  // Who makes the swap sets (offload::StateStoreOptions::owner): `tierflow
  // train` records its output directory, so a later run there may remove
  // them once stale, and no other may. Default (empty): no owner record.
  std::string swap_owner;
  // Makes the NVMe rings' backends; tests inject faults here. Default: io_uring.
  offload::IoBackendFactory nvme_backend_factory;
  // How the NVMe store drives the drive (block size, queue depth, rings):
  // `tierflow train` takes them from aio keys, a tuned profile or its
  // start-up probe. Default: 1 MiB blocks, queue depth 32, 1 ring.
  NvmeIoSettings nvme_io;

  // How units are cut into optimizer sub-groups (tierflow/sub_group_rule.h):
  // kSlices of at most sub_group_params (>= 1), or DeepSpeed's whole tensors
  // of at least sub_group_params (0: one tensor each). Default: 4Mi slices.
  uint64_t sub_group_params = 4u << 20;
  SubGroupCut sub_group_cut = SubGroupCut::kSlices;
  int buffer_count = 4;  // NVMe I/O slots and weight staging slots. Default: 4
  int grad_buckets = 3;  // device gradient buckets. Default: 3
  // Parameters per gradient bucket (fp32 on the device, plus its transfer
  // buffer). A unit larger than this streams its gradient in pieces
  // (UnitAccess::GradPieceCapacity); the model refuses a bucket smaller than
  // the gradient one of its kernels writes at once. 0: the largest unit
  // (every unit in one piece). Values above the largest unit allocate only
  // that. Default: 0.
  uint64_t grad_bucket_params = 0;
  // Page-lock the host tier's optimizer state (mlock): DeepSpeed's
  // offload_optimizer.pin_memory. The buffers DMA touches are pinned either
  // way; this keeps the state resident and unswappable. Default: false.
  bool lock_host_state = false;

  Pipeline pipeline = Pipeline::kOverlapped;
  // kOverlapped: at most this many parameters are updated speculatively per
  // step. Each costs its new weights in pinned memory (weights dtype) and,
  // when its sub-group's state is on the host tier, a 12 B/param backup for
  // rollback (NVMe sub-groups keep two copies on disk instead). `tierflow
  // train` sets it from the host memory the planner says is free
  // (plan/speculation_budget.h). Default: 256Mi.
  uint64_t speculation_params = 256u << 20;
  // kOverlapped: speculate on a unit's sub-groups as soon as its gradients are
  // in, before accumulating the next unit's (deterministic: every sub-group
  // within the budget is speculated). Default false: speculation fills the
  // worker's idle time between arrivals and never delays the clip decision.
  bool speculate_eagerly = false;
  // Micro-batches in every Step, when the caller fixes it (0: any number).
  // It sizes the host side of the gradient stream to what the steps use:
  //   1: gradients land from the device, in the transfer dtype, in one
  //      pinned buffer (2 B/param for 16-bit transfers); no pinned staging.
  //   > 1: pinned staging buckets are the D2H landing, and the fp32
  //      accumulator (4 B/param) is pageable memory (huge pages): no DMA
  //      reads or writes it.
  //   0: both: a pinned fp32 buffer that serves as either, and the staging.
  // A Step with another number of micro-batches is InvalidArgument.
  int micro_batches_per_step = 0;
  // kOverlapped: after a step whose gradients were clipped (or overflowed),
  // the next step does not speculate: clipping tends to persist over steps,
  // and a rolled-back speculation costs its updates twice (on NVMe, a read and
  // a write per sub-group). Every step still computes its norm, so speculation
  // resumes after the first step that is not clipped. Exact either way.
  // Default: true.
  bool pause_speculation_after_clip = true;

  // Weights of some units off the device (kNone: all resident). kAuto is
  // the planner's to resolve: Init refuses it.
  ParamStreaming params;

  TraceRecorder* trace = nullptr;  // not owned; null = no spans

  // Data parallelism (ZeRO stage 2 with the optimizer on the host): this
  // process is one of comm->world_size() ranks, each with its own device
  // and the same model. Step() then takes the global step's micro-batches
  // (the same list on every rank) and runs those with k % world == rank;
  // each unit's gradient is reduce-scattered as soon as backward completes
  // it, each rank owns and updates only its part of every unit (parts cut
  // at kOptimChunkElems, comm/partition.h), and the updated 16-bit weights
  // are all-gathered. micro_batches_per_step must be a multiple of the
  // world size. With MPI the gradient sum and the global norm have a fixed
  // order, so N ranks of A micro-batches are bit-identical to one rank
  // accumulating the same N x A micro-batches. Not owned; every collective is issued from
  // the engine's worker thread. Null or a world of 1: one process, no
  // collectives.
  comm::Communicator* comm = nullptr;
  // Collectives on device buffers, beside `comm` (same ranks, same order):
  // NCCL on GPUs (comm/nccl_communicator.h), or on the CPU device and the
  // simulated accelerators the MPI backend over their memory, which the
  // host addresses (comm/host_memory_device_comm.h). Each piece of a unit's
  // gradient is then reduce-scattered on the devices as backward ends it,
  // and only this rank's part, summed in fp32, crosses to the host (4/N
  // bytes per parameter once per step, where the host path lands 2 per
  // micro-batch); a resident unit's new weights go up as this rank's part
  // and are all-gathered on the devices. The norm, the losses and the
  // streamed units' copies stay on `comm`. Null: everything on `comm`.
  comm::Communicator* device_comm = nullptr;
};

struct StepStats {
  int64_t step = 0;                 // optimizer steps applied so far (after this one)
  float loss = 0;                   // mean over micro-batches
  double grad_norm = 0;             // global L2 norm of the unscaled gradient
  float clip_coef = 1;              // applied to the gradient (1 = no clipping)
  float loss_scale = 1;             // scale used by this step's backward
  bool skipped = false;             // non-finite gradients: nothing was updated
  bool rolled_back = false;         // speculative updates were undone and redone
  int speculated_groups = 0;        // sub-groups updated during backward
  bool speculation_paused = false;  // the step before was clipped: no speculation (see options)
  double wall_seconds = 0;          // from the first forward to the last weight upload
  std::map<std::string, double> stage_seconds;  // busy time per stage
  double overlap_efficiency = 0;                // (sum stages - wall) / (sum - longest), 0..1
  // Bytes across PCIe this step: D2H the gradients (every micro-batch, in the
  // gradient transfer dtype), H2D the updated weights.
  uint64_t d2h_bytes = 0, h2d_bytes = 0, nvme_read_bytes = 0, nvme_written_bytes = 0;
  // Parameter offload: bytes of streamed weights uploaded into device slots
  // (every micro-batch, forward and backward; part of h2d_bytes), and read
  // from NVMe for them (kNvme; part of nvme_read_bytes).
  uint64_t param_h2d_bytes = 0, param_nvme_read_bytes = 0;
  uint64_t device_peak_bytes = 0, pinned_peak_bytes = 0, host_state_bytes = 0;
  // Some rank asked to stop (OffloadEngine::SetStopRequested) by the time
  // it had run this step's micro-batches: every rank sees the same answer.
  bool stop_requested = false;
};

}  // namespace tierflow

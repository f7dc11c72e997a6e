// Step-time prediction. The engine runs each micro-batch's backward on the
// device while its gradients stream out (D2H) and accumulate on the host;
// the CPU optimizer then updates sub-groups with NVMe reads, writes and the
// H2D of new weights pipelined behind it, overlapping the next step's
// forward. So a step takes the slowest stage of each overlapped phase plus
// the update pipeline's fill.
#include "plan/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/checked_math.h"
#include "common/units.h"
#include "plan/memory_model.h"
#include "plan/param_placement.h"
#include "plan/plan_report.h"

namespace tierflow {
namespace {

double Seconds(double amount, double rate) { return rate > 0 ? amount / rate : 0.0; }

// The stage times of one step, and the figures the step's formula and the
// advice take from them. Per rank unless said.
struct StepCosts {
  // The run's shape: parameters, bytes of a weight, micro-batches per step,
  // state bytes per parameter, bytes of a gradient as it leaves the device,
  // ranks, ranks on a node, GPUs on a PCIe link.
  double P = 0, a = 0, k = 0, s = 0, t = 0, W = 0, N = 0, G = 0;
  bool dp = false, on_device = false;  // data parallel; device collectives
  double rank_params = 0, rank_tokens = 0, h2d_rate = 0;
  // The device's phase: compute, and the gradients leaving it.
  double compute = 0, d2h = 0, accumulate = 0, reduce_scatter = 0, all_gather = 0;
  // The update.
  double optimizer = 0, nvme = 0, h2d = 0;
  // Parameter offload: the streamed units' uploads, per micro-batch, and
  // their reads and write-back on NVMe.
  bool streams = false, from_nvme = false;
  double fetch_h2d = 0, fetch_read = 0, fetch_each = 0, param_writes = 0;
  double h2d_params = 0, nvme_params_seconds = 0, forward_fetch = 0;
  // Activation checkpoints in host memory, per micro-batch: down in
  // forward, up in backward (the same bytes each way).
  double act_d2h = 0, act_h2d = 0;
  // The gradients on NVMe (GradOffload::kNvme): drive rates, and the
  // seconds their writes and reads add to the step's NVMe traffic.
  bool spill = false;
  double nvme_read_rate = 0, nvme_write_rate = 0, grad_nvme = 0;
  // The step's formula.
  double per_micro_compute = 0, forward_share = 0, once = 0, groups = 1;
  double update_nvme = 0, update_slowest = 0, update_sum = 0, update = 0;

  // Bytes the gradients on NVMe move each way per step with `micro`
  // micro-batches: one lands in the transfer dtype, written once and read
  // back for the update; several accumulate in fp32, each micro-batch's
  // sum written, and read back by the next micro-batch or the update.
  // With data parallelism each rank moves its parts' fp32 running sum,
  // every micro-batch of its own (the ranks' sum is fp32 from the first).
  double GradNvmeBytes(double micro) const {
    if (!spill) return 0;
    if (dp) return micro * 4.0 * rank_params;
    return micro > 1 ? micro * 4.0 * P : P * t;
  }
  double GradNvmeSeconds(double micro) const {
    const double bytes = GradNvmeBytes(micro);
    return Seconds(bytes, nvme_read_rate) + Seconds(bytes, nvme_write_rate);
  }
  // The update's times from its stages (the drives' share given).
  void SetUpdate(double optimizer_s, double nvme_s, double h2d_s, double gather_s) {
    update_nvme = nvme_s;
    update_slowest = std::max({optimizer_s, update_nvme, h2d_s, gather_s});
    update_sum = optimizer_s + update_nvme + h2d_s + gather_s;
    update = update_slowest + (update_sum - update_slowest) / groups;
  }
  // These costs with `micro` micro-batches a step instead: the gradients'
  // NVMe traffic follows the count (the rest of the update does not).
  StepCosts WithMicroBatches(double micro) const {
    StepCosts other = *this;
    other.SetUpdate(optimizer, update_nvme - grad_nvme + GradNvmeSeconds(micro), h2d, all_gather);
    other.grad_nvme = GradNvmeSeconds(micro);
    return other;
  }

  // The step with `micro` micro-batches, each computing for `compute_each`
  // and transferring for `transfer`. Each phase takes its slowest stage:
  // forward the streamed uploads before the loss (forward_fetch of them),
  // backward the rest. One H2D direction and one set of drives carry all
  // of a step's bytes, so the step is never shorter than either's total.
  // Device collectives: the last micro-batch also carries this rank's part
  // of the sum across, once a step.
  double Step(double compute_each, double micro, double transfer) const {
    // The checkpoints go down beside forward (the D2H direction is free
    // then) and come up beside backward, sharing H2D with the streamed
    // weights and D2H with nothing but the gradients of later micro-batches.
    const double phases =
        std::max({update, forward_share * compute_each, forward_fetch * fetch_each, act_d2h}) +
        std::max({(1 - forward_share) * compute_each, transfer + once,
                  (1 - forward_fetch) * fetch_each + act_h2d}) +
        (micro - 1) * std::max({compute_each, transfer + act_d2h, fetch_each + act_h2d});
    const double link = h2d + micro * (fetch_h2d + act_h2d);
    const double drives = update_nvme + micro * fetch_read;
    return std::max({phases, link, drives});
  }
};

StepCosts RunShape(const PlanInput& in, const Hardware& hw, const Plan& plan) {
  StepCosts c;
  c.P = static_cast<double>(plan.params);
  c.a = static_cast<double>(DTypeSize(in.dtype));
  c.k = static_cast<double>(in.grad_accum);
  c.s = static_cast<double>(plan.state_bytes_per_param);
  c.t = static_cast<double>(DTypeSize(plan.grad_transfer_dtype));
  // Data parallelism: W ranks, N on each node. The node's NVMe serves its
  // ranks' state; G GPUs share each PCIe link.
  c.W = static_cast<double>(in.ranks());
  c.dp = in.ranks() > 1;
  c.N = static_cast<double>(in.gpus_per_node);
  c.G = static_cast<double>(std::clamp(in.gpus_per_pcie_link, 1, in.gpus_per_node));
  // Device collectives: the ranks sum it on their devices and only this
  // rank's part, fp32, crosses, once a step (during the last backward).
  c.on_device = in.device_collectives;  // (one rank: the check of the path)
  c.rank_params = static_cast<double>(plan.data_parallel.rank_params);
  c.rank_tokens = static_cast<double>(plan.tokens_per_step) / c.W;
  c.h2d_rate = hw.bandwidths.h2d_gb_per_second * 1e9 / c.G;
  c.spill = plan.placement.gradients == GradOffload::kNvme;
  c.nvme_read_rate = hw.bandwidths.nvme_read_gb_per_second * 1e9;
  c.nvme_write_rate = hw.bandwidths.nvme_write_gb_per_second * 1e9;
  const double act = static_cast<double>(plan.activations.checkpoint_transfer);
  c.act_d2h = Seconds(act, hw.bandwidths.d2h_gb_per_second * 1e9 / c.G);
  c.act_h2d = Seconds(act, c.h2d_rate);
  return c;
}

std::string Interconnect(const PlanInput& in, bool dp, bool on_device) {
  return !dp ? "none: one rank"
         : on_device
             ? (in.nodes > 1 ? "device collectives (NCCL) across " + std::to_string(in.nodes) +
                                   " nodes: the slower of PCIe and the network"
                             : "device collectives (NCCL) over PCIe")
         : in.nodes > 1 ? "host collectives (MPI) across " + std::to_string(in.nodes) +
                              " nodes: the slower of shared memory and the network"
                        : "host collectives (MPI) in shared memory";
}

// Forward and backward, and the gradients' way to the host and across the
// ranks. Sets the plan's FLOPs and its collectives' times.
void GradientPhase(const PlanInput& in, const Bandwidths& bw, Plan& plan, StepCosts& c) {
  plan.flops_per_step = TrainingFlopsPerToken(in.model, in.seq_len, in.checkpointing) *
                        static_cast<double>(plan.tokens_per_step);
  // A tiled MLP without checkpointing recomputes each tile's gate and up
  // (GELU: fc) projections in backward; under checkpointing the block's
  // recompute skips the MLP instead, so tiling costs nothing there.
  if (in.mlp_tile_rows.value_or(0) > 0 && !in.checkpointing) {
    const double projections = in.model.mlp == MlpKind::kSwiGlu ? 2 : 1;
    plan.flops_per_step += 2.0 * projections * static_cast<double>(in.model.n_layers) *
                           static_cast<double>(in.model.d_model) *
                           static_cast<double>(in.model.d_ff) *
                           static_cast<double>(plan.tokens_per_step);
  }
  // Vocabulary slices: the head recomputes its logits for the weight gradient.
  if (plan.placement.vocab_sliced) {
    plan.flops_per_step += 2.0 * static_cast<double>(in.model.vocab_size) *
                           static_cast<double>(in.model.d_model) *
                           static_cast<double>(plan.tokens_per_step);
  }
  // Each rank computes its share, all at once.
  c.compute = Seconds(plan.flops_per_step / c.W, bw.device_tflops * 1e12 * bw.device_efficiency);
  // Gradients leave the device in the transfer dtype, every micro-batch.
  const double d2h_rate = bw.d2h_gb_per_second * 1e9 / c.G;
  c.d2h = c.on_device ? Seconds(c.rank_params * 4, d2h_rate) : Seconds(c.k * c.P * c.t, d2h_rate);
  // Several ranks: nothing is accumulated locally; the reduce-scatter adds.
  // On NVMe with one micro-batch the worker still copies each piece from
  // its staging into a spill slot (read and write).
  const double taken_in =
      c.spill && in.grad_accum == 1 ? 2.0 * c.t : AccumulateBytesPerParam(in.grad_accum, c.t);
  c.accumulate =
      c.dp || c.on_device ? 0 : Seconds(c.P * taken_in, bw.host_memory_gb_per_second * 1e9);
  // Collectives over W ranks move S (W - 1) / W bytes at the bus bandwidth;
  // between nodes the slower of shared memory and the network sets it.
  // On the devices (NCCL), within a node over PCIe (its peer-to-peer rate
  // taken as the link's: no NVLink figure is measured).
  const double intra = c.on_device ? std::min(bw.h2d_gb_per_second, bw.d2h_gb_per_second) / c.G
                                   : bw.intra_node_busbw_gb_per_second;
  const double busbw =
      (in.nodes > 1 ? std::min(intra, bw.inter_node_busbw_gb_per_second) : intra) * 1e9;
  const double ring = c.dp ? (c.W - 1) / c.W : 0;
  c.reduce_scatter = c.dp ? c.k * Seconds(c.P * c.t * ring, busbw) : 0;
  c.all_gather = c.dp ? Seconds(c.P * c.a * ring, busbw) : 0;
  plan.data_parallel.reduce_scatter_seconds = c.reduce_scatter;
  plan.data_parallel.all_gather_seconds = c.all_gather;
  plan.data_parallel.interconnect = Interconnect(in, c.dp, c.on_device);
}

// The update's stages: the CPU optimizer, the state's NVMe I/O, the new
// weights' H2D; and parameter offload's uploads and NVMe traffic.
void UpdateAndParams(const PlanInput& in, const Bandwidths& bw, const Plan& plan, StepCosts& c) {
  // The node's cores update all its ranks' parts.
  c.optimizer = Seconds(c.dp ? static_cast<double>(plan.data_parallel.rank_params) * c.N : c.P,
                        bw.adam_params_per_second);
  // Reads and writes share the drives, so their times add.
  const double nvme_params = static_cast<double>(plan.placement.nvme_state_params) * c.N;
  c.nvme = Seconds(nvme_params * c.s, bw.nvme_read_gb_per_second * 1e9) +
           Seconds(nvme_params * c.s, bw.nvme_write_gb_per_second * 1e9);
  // The gradients on NVMe share the drives with the state: their bytes add.
  c.grad_nvme = c.GradNvmeSeconds(c.k);
  c.nvme += c.grad_nvme;
  // Parameter offload: every micro-batch uploads the streamed units into the
  // device slots (from pinned host memory, or read from NVMe into pinned
  // staging first: the reads and the uploads pipeline, the slower one sets
  // the pace), during its forward and backward; the update writes each
  // streamed unit's new weights back once (kNvme: to the drive; kHost: into
  // the pinned copy, in place of the staging the resident units use).
  const ParamPlacement& pp = plan.placement.params;
  c.streams = pp.where != ParamOffload::kNone;
  c.from_nvme = pp.where == ParamOffload::kNvme;
  const double resident = c.streams ? static_cast<double>(pp.resident_params) : c.P;
  const double fetch = static_cast<double>(pp.fetch_bytes_per_micro_batch);
  c.fetch_h2d = Seconds(fetch, c.h2d_rate);  // per micro-batch
  // The node's N ranks each read and write their own copy on its drives.
  c.fetch_read = c.from_nvme ? Seconds(c.N * fetch, bw.nvme_read_gb_per_second * 1e9) : 0;
  c.fetch_each = std::max(c.fetch_h2d, c.fetch_read);
  c.param_writes = c.from_nvme ? Seconds(c.N * static_cast<double>(pp.streamed_params) * c.a,
                                         bw.nvme_write_gb_per_second * 1e9)
                               : 0;
  c.h2d_params = c.k * c.fetch_h2d;
  c.nvme_params_seconds = c.k * c.fetch_read + c.param_writes;
  c.forward_fetch = ForwardFetchShare(pp, ModelUnitsOf(in.model));
  // Device collectives: each rank uploads its part of the resident units.
  c.h2d = Seconds(resident * c.a * (c.on_device ? c.rank_params / c.P : 1.0), c.h2d_rate);
  c.per_micro_compute = c.compute / c.k;
}

// The update (optimizer, NVMe, H2D pipelined over sub-groups) of step n
// overlaps the first forward of step n+1, which waits per unit; each
// backward overlaps its own D2H and accumulation. Speculation during
// backward (the overlapped pipeline) can only shorten this; not counted.
void Overlap(const PlanInput& in, const Plan& plan, StepCosts& c) {
  c.forward_share = in.checkpointing ? 0.25 : 1.0 / 3.0;  // 2N of 8N or 6N
  // The streamed units' write-back shares the drives with the state's I/O.
  c.groups = static_cast<double>(std::max<int64_t>(plan.placement.num_sub_groups, 1));
  c.SetUpdate(c.optimizer, c.nvme + c.param_writes, c.h2d, c.all_gather);
  c.once = c.on_device ? c.d2h : 0;
}

std::string FetchNote(const ParamPlacement& pp, const StepCosts& c) {
  char note[384];
  std::snprintf(note, sizeof note,
                "streamed weights into the device slots, %s per micro-batch: %.3g s%s against "
                "%.3g s of its compute (%s)",
                FormatBytes(pp.fetch_bytes_per_micro_batch).c_str(), c.fetch_each,
                c.fetch_read > c.fetch_h2d ? " (the NVMe reads set the pace)" : "",
                c.per_micro_compute,
                c.fetch_each <= c.per_micro_compute
                    ? "hidden behind it"
                    : "compute waits on them; a larger --micro-batch computes longer per fetch");
  return note;
}

// The plan's stages, each with what it does.
std::vector<StageTime> Stages(const PlanInput& in, const Plan& plan, const StepCosts& c) {
  const bool dp = c.dp;
  const bool on_device = c.on_device;
  const std::string link =
      c.G > 1 ? " (" + std::to_string(in.gpus_per_pcie_link) + " GPUs share each PCIe link)" : "";
  std::vector<StageTime> stages = {
      {"compute", c.compute,
       dp ? "forward + backward on each rank's device, all at once"
          : "forward + backward on the device"},
      {"d2h_gradients", c.d2h,
       (on_device ? std::string("fp32: each rank's part of the gradient summed on the devices, "
                                "once a step")
                  : std::string(DTypeName(plan.grad_transfer_dtype)) +
                        (dp ? " gradients, the whole model's, to each rank's pinned host "
                              "buffers, every micro-batch"
                            : " gradients to pinned host buffers, every micro-batch")) +
           link},
      {"host_accumulate", c.accumulate,
       dp                  ? "none: the reduce-scatter adds the ranks' micro-batches in order"
       : in.grad_accum > 1 ? (c.spill ? "fp32 gradient accumulation on the host, into the "
                                        "spill slots (the running sum read back from NVMe)"
                                      : "fp32 gradient accumulation on the host")
       : c.spill           ? "each piece copied from its staging into a spill slot"
                           : "none: one micro-batch's gradients land as they are, their norm "
                             "is computed on the device"},
      {"activation_checkpoints", c.k * (c.act_d2h + c.act_h2d),
       c.act_d2h > 0 ? "each micro-batch's checkpoints, " +
                           FormatBytes(plan.activations.checkpoint_transfer) +
                           " down to pinned host memory beside forward and up again beside backward"
                     : "none: the checkpoints stay on the device"},
      {"h2d_params", c.h2d_params,
       c.streams ? FetchNote(plan.placement.params, c) : "none: every unit's weights are resident"},
      {"optimizer", c.optimizer,
       dp ? "the node's CPU optimizer over its " + std::to_string(in.gpus_per_node) +
                " ranks' parts (each rank's 1/" + std::to_string(in.ranks()) + " of every unit)"
          : "CPU optimizer over all parameters"},
      {"nvme_io", c.nvme,
       dp        ? "optimizer state read + written for the NVMe share of the node's ranks"
       : c.spill ? "optimizer state read + written for the NVMe share, and the gradients: " +
                       FormatBytes(static_cast<uint64_t>(c.GradNvmeBytes(c.k))) +
                       " written and read back (" + FormatSeconds(c.grad_nvme) + ")"
                 : "optimizer state read + written for the NVMe share"},
      {"nvme_params", c.nvme_params_seconds,
       c.from_nvme ? "streamed weights read every micro-batch, their new values written once a "
                     "step (the same drives as the state)"
                   : "none: no weights on NVMe"},
      {"h2d_weights", c.h2d,
       c.streams   ? "new weights of the resident units to the device (streamed units' go to their "
                     "copy)"
       : on_device ? "each rank's part of the new weights to its device" + link
       : dp        ? "the whole model's new weights to each rank's device" + link
                   : "new weights to the device"},
  };
  if (dp) {
    stages.insert(stages.begin() + 2, {"reduce_scatter", c.reduce_scatter,
                                       "the gradient summed over " + std::to_string(in.ranks()) +
                                           " ranks, each micro-batch, during backward: " +
                                           plan.data_parallel.interconnect});
    stages.push_back({"all_gather", c.all_gather,
                      "each rank's new weights to every rank, during the update: " +
                          plan.data_parallel.interconnect});
  }
  return stages;
}

// Advice: the tokens per step at which compute outlasts the update, and
// the micro-batch size and accumulation that reach them fastest. Each
// candidate, the micro-batch as given (or the least that computes longer
// than its transfers, which accumulation needs) accumulated up to those
// tokens and larger micro-batches (doubling, up to all of them in one)
// accumulating less, is predicted by the step's formula, with the
// gradients' NVMe traffic of its accumulation where they wait on the
// drives; the fastest per token that the device holds is advised (on a tie
// the one accumulating least), never accumulation by default.
struct ComputeBoundCandidate {
  int64_t batch = 0, micro = 0, tokens = 0;
  double step = 0, rate = 0;
  uint64_t device = 0;
  bool fits = false;
};

void AdviseComputeBound(const PlanInput& in, const Bandwidths& bw, Plan& plan, const StepCosts& c) {
  plan.compute_bound = {};
  if (c.update_slowest <= c.compute || c.per_micro_compute <= 0 || plan.tokens_per_step <= 0) {
    return;
  }
  const std::string slowest = c.update_slowest == c.optimizer     ? "the CPU optimizer"
                              : c.update_slowest == c.update_nvme ? "NVMe I/O"
                              : c.update_slowest == c.h2d         ? "the weights' H2D"
                                                                  : "the weights' all-gather";
  // Per rank: its sequences, and each micro-batch's transfers.
  const double per_sequence = c.compute / c.rank_tokens * static_cast<double>(in.seq_len);
  // The update to outlast: with the gradients on NVMe, one micro-batch's
  // traffic (each accumulated micro-batch adds its own, which the
  // candidates below count).
  const double to_outlast = c.spill ? c.WithMicroBatches(1).update_slowest : c.update_slowest;
  const auto sequences =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(to_outlast / per_sequence)));
  const double d2h_sequence = c.d2h / c.k / static_cast<double>(in.micro_batch);
  const double transfer_micro =
      c.on_device ? c.reduce_scatter / c.k
                  : std::max(c.d2h / c.k,
                             c.dp ? c.reduce_scatter / c.k
                                  : Seconds(c.P * (c.t + 8.0), bw.host_memory_gb_per_second * 1e9));
  // The least micro-batch: as given while it computes longer than a
  // transfer (accumulation then works), else the least that does.
  int64_t least = in.micro_batch;
  if (static_cast<double>(least) * per_sequence <= transfer_micro) {
    least = std::min<int64_t>(sequences,
                              static_cast<int64_t>(std::floor(transfer_micro / per_sequence)) + 1);
  }
  least = std::max<int64_t>(least, 1);
  const uint64_t device_without = plan.device.total_bytes() - plan.activations.total();
  std::vector<ComputeBoundCandidate> candidates;
  // Every micro-batch count from the least micro-batch's down to one (about
  // 2 sqrt(sequences) of them), each with its sequences spread evenly: every
  // candidate steps about the same tokens.
  for (int64_t b = least;;) {
    ComputeBoundCandidate k;
    k.micro = std::max<int64_t>(1, (sequences + b - 1) / b);
    const int64_t batch = std::max(least, (sequences + k.micro - 1) / k.micro);
    k.batch = batch;
    k.tokens = SaturatingMul(SaturatingMul(SaturatingMul(batch, in.seq_len), k.micro), in.ranks());
    const double micro_compute = per_sequence * static_cast<double>(batch);
    const double transfer = k.micro > 1 || c.dp || c.on_device
                                ? transfer_micro
                                : d2h_sequence * static_cast<double>(batch);
    const auto micro = static_cast<double>(k.micro);
    k.step = c.WithMicroBatches(micro).Step(micro_compute, micro, transfer);
    k.rate = k.step > 0 ? static_cast<double>(k.tokens) / k.step : 0;
    ActivationOptions act = ActivationOptionsOf(in);
    act.micro_batch = batch;
    k.device = device_without + ComputeActivationBytes(in.model, act).total();
    k.fits = k.device <= plan.device.capacity_bytes;
    candidates.push_back(k);
    if (k.micro <= 1) break;
    b = (sequences + k.micro - 2) / (k.micro - 1);  // the least batch of one micro-batch fewer
  }
  // The fastest per token the device holds (else the fastest); on a tie,
  // the larger micro-batch (less accumulation). Then the best of the other
  // kind (one micro-batch against accumulation), to say what it would give.
  auto better = [](const ComputeBoundCandidate& x, const ComputeBoundCandidate* y) {
    if (y == nullptr) return true;
    if (x.fits != y->fits) return x.fits;
    if (x.rate != y->rate) return x.rate > y->rate;
    return x.batch > y->batch;
  };
  const ComputeBoundCandidate* best = nullptr;
  for (const ComputeBoundCandidate& k : candidates) {
    if (better(k, best)) best = &k;
  }
  const ComputeBoundCandidate* other = nullptr;
  for (const ComputeBoundCandidate& k : candidates) {
    if ((k.micro > 1) != (best->micro > 1) && better(k, other)) other = &k;
  }
  plan.compute_bound.grad_accum = best->micro;
  plan.compute_bound.tokens_per_step = best->tokens;
  plan.compute_bound.step_seconds = best->step;
  std::string against;
  if (other != nullptr) {
    char alt[256];
    std::snprintf(
        alt, sizeof alt, "; --micro-batch %lld --grad-accum %lld would give %.0f tokens/s%s",
        static_cast<long long>(other->batch), static_cast<long long>(other->micro), other->rate,
        other->fits ? "" : " if the device held it (it needs more than it has)");
    against = alt;
  }
  if (c.spill && (best->micro > 1 || (other != nullptr && other->micro > 1))) {
    against += "; with the gradients on NVMe each accumulated micro-batch writes and reads " +
               FormatBytes(static_cast<uint64_t>(4.0 * c.P)) + " of fp32 sum";
  }
  char line[1024];
  std::snprintf(
      line, sizeof line,
      "%s (%.3g s) is the slowest stage; compute would outlast it from about %lld tokens/step "
      "(now %lld): --micro-batch %lld --grad-accum %lld, a step of about %.3g s, %.0f tokens/s "
      "(now %.0f). The device then needs %.2f GiB of %.2f (%s)%s%s",
      slowest.c_str(), c.update_slowest,
      static_cast<long long>(SaturatingMul(SaturatingMul(sequences, in.seq_len), in.ranks())),
      static_cast<long long>(plan.tokens_per_step), static_cast<long long>(best->batch),
      static_cast<long long>(best->micro), best->step, best->rate,
      static_cast<double>(plan.tokens_per_step) / plan.predicted_step_seconds,
      static_cast<double>(best->device) / (1ull << 30),
      static_cast<double>(plan.device.capacity_bytes) / (1ull << 30),
      best->fits ? "fits" : "does not fit", against.c_str(),
      c.dp              ? "; plan with these to see they fit"
      : best->micro > 1 ? (c.spill ? "; the gradients accumulate in fp32 (4 B/param) on NVMe: "
                                     "plan with these to see they fit"
                                   : "; the host accumulates in fp32 (4 B/param, pageable): "
                                     "plan with these to see they fit")
                        : "");
  plan.compute_bound.advice = line;
}

}  // namespace

double TrainingFlopsPerToken(const ModelConfig& m, int64_t seq_len, bool checkpointing) {
  double matmul_params = static_cast<double>(ParameterCount(m) - EmbeddingParameterCount(m));
  if (m.tie_embeddings) matmul_params += static_cast<double>(m.vocab_size) * m.d_model;
  const double attention = 12.0 * static_cast<double>(m.n_layers) * static_cast<double>(seq_len) *
                           static_cast<double>(m.n_heads * m.head_dim);
  const double flops = 6.0 * matmul_params + attention;
  return checkpointing ? flops * 4.0 / 3.0 : flops;
}

double AccumulateBytesPerParam(int64_t grad_accum, double transfer_bytes) {
  if (grad_accum <= 1) return 0;
  return static_cast<double>(grad_accum) * (transfer_bytes + 8.0);
}

void PredictStepTime(const PlanInput& in, const Hardware& hw, Plan& plan) {
  StepCosts c = RunShape(in, hw, plan);
  GradientPhase(in, hw.bandwidths, plan, c);
  UpdateAndParams(in, hw.bandwidths, plan, c);
  Overlap(in, plan, c);
  plan.stages = Stages(in, plan, c);
  plan.predicted_step_seconds =
      c.Step(c.per_micro_compute, c.k,
             c.on_device ? c.reduce_scatter / c.k
                         : std::max({c.d2h, c.accumulate, c.reduce_scatter}) / c.k);
  plan.serial_step_seconds = c.compute + c.d2h + c.accumulate + c.reduce_scatter + c.h2d_params +
                             c.k * (c.fetch_read + c.act_d2h + c.act_h2d) + c.update_sum;
  plan.gradients.nvme_write_bytes_per_step = static_cast<uint64_t>(c.GradNvmeBytes(c.k));
  plan.gradients.nvme_read_bytes_per_step = static_cast<uint64_t>(c.GradNvmeBytes(c.k));
  plan.gradients.nvme_seconds_per_step = c.grad_nvme;
  AdviseComputeBound(in, hw.bandwidths, plan, c);
}

const StageTime& SlowestStage(const Plan& plan) {
  static const StageTime kNone{"none", 0, ""};
  if (plan.stages.empty()) return kNone;
  return *std::max_element(
      plan.stages.begin(), plan.stages.end(),
      [](const StageTime& x, const StageTime& y) { return x.seconds < y.seconds; });
}

namespace {

// What a stage that does not shrink with more GPUs per node is bound by,
// and what changes it.
std::string BoundBy(const PlanInput& in, const Plan& plan, const std::string& stage) {
  if (stage == "optimizer") {
    return "the CPU optimizer, bound by the node's host memory bandwidth: each node updates its "
           "ranks' parts, " +
           (in.nodes == 1 ? std::string("all") : "1/" + std::to_string(in.nodes)) +
           " of the model (" +
           FormatBytes(static_cast<uint64_t>(plan.data_parallel.rank_params) *
                       static_cast<uint64_t>(in.gpus_per_node) * plan.state_bytes_per_param) +
           " of state), however many GPUs it has; more nodes split it, and a larger --grad-accum "
           "spreads it over more tokens";
  }
  if (stage == "nvme_io") {
    return "the node's NVMe bandwidth, which its ranks share: add drives (--nvme-path on each), "
           "or keep more of the state in host memory";
  }
  if (stage == "d2h_gradients" || stage == "h2d_weights") {
    std::string s =
        "PCIe: every rank moves the whole model's gradient and weights over its link (the host "
        "path)";
    if (in.gpus_per_pcie_link > 1) {
      s += ", and " + std::to_string(in.gpus_per_pcie_link) + " GPUs share each link";
    }
    return s + "; a larger --micro-batch moves them less often per token";
  }
  if (stage == "reduce_scatter" || stage == "all_gather") {
    return std::string(in.nodes > 1 ? "the collectives across nodes (the slower of shared "
                                      "memory and the network)"
                                    : "the host's shared-memory collectives (host memory "
                                      "bandwidth)") +
           (stage == "reduce_scatter"
                ? ": each micro-batch's gradient crosses it; a larger --micro-batch crosses it "
                  "less often per token"
                : ": the new weights cross it once a step; a larger --grad-accum spreads that "
                  "over more tokens");
  }
  return "the " + stage + " stage";
}

}  // namespace

std::string ScalingAdvice(const PlanInput& in, const Plan& plan) {
  const std::vector<Plan::DataParallel::Point>& points = plan.data_parallel.scaling;
  if (points.empty()) return "";
  // The first doubling that gains less than 3/4 of linear.
  const Plan::DataParallel::Point* before = nullptr;
  const Plan::DataParallel::Point* after = nullptr;
  for (size_t i = 1; i < points.size(); ++i) {
    const double linear =
        points[i - 1].tokens_per_second * points[i].gpus_per_node / points[i - 1].gpus_per_node;
    if (points[i].tokens_per_second < 0.75 * linear) {
      before = &points[i - 1];
      after = &points[i];
      break;
    }
  }
  const Plan::DataParallel::Point& first = points.front();
  const Plan::DataParallel::Point& last = points.back();
  const double of_linear =
      first.tokens_per_second > 0
          ? last.tokens_per_second / (first.tokens_per_second * last.gpus_per_node)
          : 0;
  // The first count that does not fit at all.
  std::string fit;
  for (const Plan::DataParallel::Point& p : points) {
    if (p.feasible) continue;
    fit = "with " + std::to_string(p.gpus_per_node) + " GPUs per node the run does not fit (" +
          p.binding + " binds" +
          (p.binding == "host" ? ": each rank lands the whole gradient in the node's memory" : "") +
          "); ";
    break;
  }
  char line[1024];
  if (after == nullptr) {
    std::snprintf(line, sizeof line,
                  "adding GPUs helps: %d GPUs per node give %.0f tokens/s, %.0f%% of %d times "
                  "one GPU's %.0f; the step waits most on %s",
                  last.gpus_per_node, last.tokens_per_second, 100 * of_linear, last.gpus_per_node,
                  first.tokens_per_second, last.slowest.c_str());
    return fit + line;
  }
  std::snprintf(line, sizeof line,
                "adding GPUs stops helping past %d per node: %d give %.0f tokens/s against %.0f "
                "with %d (%d GPUs per node: %.0f, %.0f%% of linear), because the step waits on "
                "%s (%s of a %s step with %d GPUs per node), which is ",
                before->gpus_per_node, after->gpus_per_node, after->tokens_per_second,
                before->tokens_per_second, before->gpus_per_node, last.gpus_per_node,
                last.tokens_per_second, 100 * of_linear, after->slowest.c_str(),
                FormatSeconds(after->slowest_seconds).c_str(),
                FormatSeconds(after->step_seconds).c_str(), after->gpus_per_node);
  return fit + line + BoundBy(in, plan, after->slowest);
}

}  // namespace tierflow

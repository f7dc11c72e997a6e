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
  const Bandwidths& bw = hw.bandwidths;
  const double P = static_cast<double>(plan.params);
  const double a = static_cast<double>(DTypeSize(in.dtype));
  const double k = static_cast<double>(in.grad_accum);
  const double s = static_cast<double>(plan.state_bytes_per_param);
  // Data parallelism: W ranks, N on each node. The node's NVMe serves its
  // ranks' state; G GPUs share each PCIe link.
  const double W = static_cast<double>(in.ranks());
  const bool dp = in.ranks() > 1;
  const double N = static_cast<double>(in.gpus_per_node);
  const double G = static_cast<double>(std::clamp(in.gpus_per_pcie_link, 1, in.gpus_per_node));
  const double nvme_params = static_cast<double>(plan.placement.nvme_state_params) * N;
  const double rank_tokens = static_cast<double>(plan.tokens_per_step) / W;

  plan.flops_per_step = TrainingFlopsPerToken(in.model, in.seq_len, in.checkpointing) *
                        static_cast<double>(plan.tokens_per_step);
  // Vocabulary slices: the head recomputes its logits for the weight gradient.
  if (plan.placement.vocab_sliced) {
    plan.flops_per_step += 2.0 * static_cast<double>(in.model.vocab_size) *
                           static_cast<double>(in.model.d_model) *
                           static_cast<double>(plan.tokens_per_step);
  }
  // Each rank computes its share, all at once.
  const double compute =
      Seconds(plan.flops_per_step / W, bw.device_tflops * 1e12 * bw.device_efficiency);
  // Gradients leave the device in the transfer dtype, every micro-batch.
  const double t = static_cast<double>(DTypeSize(plan.grad_transfer_dtype));
  const double d2h_rate = bw.d2h_gb_per_second * 1e9 / G;
  const double h2d_rate = bw.h2d_gb_per_second * 1e9 / G;
  // Device collectives: the ranks sum it on their devices and only this
  // rank's part, fp32, crosses, once a step (during the last backward).
  const bool on_device = in.device_collectives;  // (one rank: the check of the path)
  const double rank_params = static_cast<double>(plan.data_parallel.rank_params);
  const double d2h = on_device ? Seconds(rank_params * 4, d2h_rate) : Seconds(k * P * t, d2h_rate);
  // Several ranks: nothing is accumulated locally; the reduce-scatter adds.
  const double accumulate = dp || on_device ? 0
                                            : Seconds(P * AccumulateBytesPerParam(in.grad_accum, t),
                                                      bw.host_memory_gb_per_second * 1e9);
  // Collectives over W ranks move S (W - 1) / W bytes at the bus bandwidth;
  // between nodes the slower of shared memory and the network sets it.
  // On the devices (NCCL), within a node over PCIe (its peer-to-peer rate
  // taken as the link's: no NVLink figure is measured).
  const double intra = on_device ? std::min(bw.h2d_gb_per_second, bw.d2h_gb_per_second) / G
                                 : bw.intra_node_busbw_gb_per_second;
  const double busbw =
      (in.nodes > 1 ? std::min(intra, bw.inter_node_busbw_gb_per_second) : intra) * 1e9;
  const double ring = dp ? (W - 1) / W : 0;
  const double reduce_scatter = dp ? k * Seconds(P * t * ring, busbw) : 0;
  const double all_gather = dp ? Seconds(P * a * ring, busbw) : 0;
  plan.data_parallel.reduce_scatter_seconds = reduce_scatter;
  plan.data_parallel.all_gather_seconds = all_gather;
  plan.data_parallel.interconnect =
      !dp         ? "none: one rank"
      : on_device ? (in.nodes > 1 ? "device collectives (NCCL) across " + std::to_string(in.nodes) +
                                        " nodes: the slower of PCIe and the network"
                                  : "device collectives (NCCL) over PCIe")
      : in.nodes > 1 ? "host collectives (MPI) across " + std::to_string(in.nodes) +
                           " nodes: the slower of shared memory and the network"
                     : "host collectives (MPI) in shared memory";
  // The node's cores update all its ranks' parts.
  const double optimizer = Seconds(dp ? static_cast<double>(plan.data_parallel.rank_params) * N : P,
                                   bw.adam_params_per_second);
  // Reads and writes share the drives, so their times add.
  const double nvme = Seconds(nvme_params * s, bw.nvme_read_gb_per_second * 1e9) +
                      Seconds(nvme_params * s, bw.nvme_write_gb_per_second * 1e9);
  // Parameter offload: every micro-batch uploads the streamed units into the
  // device slots (from pinned host memory, or read from NVMe into pinned
  // staging first: the reads and the uploads pipeline, the slower one sets
  // the pace), during its forward and backward; the update writes each
  // streamed unit's new weights back once (kNvme: to the drive; kHost: into
  // the pinned copy, in place of the staging the resident units use).
  const ParamPlacement& pp = plan.placement.params;
  const bool streams = pp.where != ParamOffload::kNone;
  const bool from_nvme = pp.where == ParamOffload::kNvme;
  const double resident = streams ? static_cast<double>(pp.resident_params) : P;
  const double fetch = static_cast<double>(pp.fetch_bytes_per_micro_batch);
  const double fetch_h2d = Seconds(fetch, h2d_rate);  // per micro-batch
  // The node's N ranks each read and write their own copy on its drives.
  const double fetch_read = from_nvme ? Seconds(N * fetch, bw.nvme_read_gb_per_second * 1e9) : 0;
  const double fetch_each = std::max(fetch_h2d, fetch_read);
  const double param_writes = from_nvme ? Seconds(N * static_cast<double>(pp.streamed_params) * a,
                                                  bw.nvme_write_gb_per_second * 1e9)
                                        : 0;
  const double h2d_params = k * fetch_h2d;
  const double nvme_params_seconds = k * fetch_read + param_writes;
  const double forward_fetch = ForwardFetchShare(pp, ModelUnitsOf(in.model));
  // Device collectives: each rank uploads its part of the resident units.
  const double h2d = Seconds(resident * a * (on_device ? rank_params / P : 1.0), h2d_rate);
  const double per_micro_compute = compute / k;
  char fetch_note[384];
  std::snprintf(fetch_note, sizeof fetch_note,
                "streamed weights into the device slots, %s per micro-batch: %.3g s%s against "
                "%.3g s of its compute (%s)",
                FormatBytes(pp.fetch_bytes_per_micro_batch).c_str(), fetch_each,
                fetch_read > fetch_h2d ? " (the NVMe reads set the pace)" : "", per_micro_compute,
                fetch_each <= per_micro_compute
                    ? "hidden behind it"
                    : "compute waits on them; a larger --micro-batch computes longer per fetch");

  const std::string link =
      G > 1 ? " (" + std::to_string(in.gpus_per_pcie_link) + " GPUs share each PCIe link)" : "";
  plan.stages = {
      {"compute", compute,
       dp ? "forward + backward on each rank's device, all at once"
          : "forward + backward on the device"},
      {"d2h_gradients", d2h,
       (on_device ? std::string("fp32: each rank's part of the gradient summed on the devices, "
                                "once a step")
                  : std::string(DTypeName(plan.grad_transfer_dtype)) +
                        (dp ? " gradients, the whole model's, to each rank's pinned host "
                              "buffers, every micro-batch"
                            : " gradients to pinned host buffers, every micro-batch")) +
           link},
      {"host_accumulate", accumulate,
       dp                  ? "none: the reduce-scatter adds the ranks' micro-batches in order"
       : in.grad_accum > 1 ? "fp32 gradient accumulation on the host"
                           : "none: one micro-batch's gradients land as they are, their norm "
                             "is computed on the device"},
      {"h2d_params", h2d_params, streams ? fetch_note : "none: every unit's weights are resident"},
      {"optimizer", optimizer,
       dp ? "the node's CPU optimizer over its " + std::to_string(in.gpus_per_node) +
                " ranks' parts (each rank's 1/" + std::to_string(in.ranks()) + " of every unit)"
          : "CPU optimizer over all parameters"},
      {"nvme_io", nvme,
       dp ? "optimizer state read + written for the NVMe share of the node's ranks"
          : "optimizer state read + written for the NVMe share"},
      {"nvme_params", nvme_params_seconds,
       from_nvme ? "streamed weights read every micro-batch, their new values written once a step "
                   "(the same drives as the state)"
                 : "none: no weights on NVMe"},
      {"h2d_weights", h2d,
       streams     ? "new weights of the resident units to the device (streamed units' go to their "
                     "copy)"
       : on_device ? "each rank's part of the new weights to its device" + link
       : dp        ? "the whole model's new weights to each rank's device" + link
                   : "new weights to the device"},
  };
  if (dp) {
    plan.stages.insert(
        plan.stages.begin() + 2,
        {"reduce_scatter", reduce_scatter,
         "the gradient summed over " + std::to_string(in.ranks()) +
             " ranks, each micro-batch, during backward: " + plan.data_parallel.interconnect});
    plan.stages.push_back({"all_gather", all_gather,
                           "each rank's new weights to every rank, during the update: " +
                               plan.data_parallel.interconnect});
  }
  // The update (optimizer, NVMe, H2D pipelined over sub-groups) of step n
  // overlaps the first forward of step n+1, which waits per unit; each
  // backward overlaps its own D2H and accumulation. Speculation during
  // backward (the overlapped pipeline) can only shorten this; not counted.
  const double forward_share = in.checkpointing ? 0.25 : 1.0 / 3.0;  // 2N of 8N or 6N
  const double per_micro = per_micro_compute;
  // The streamed units' write-back shares the drives with the state's I/O.
  const double update_nvme = nvme + param_writes;
  const double update_slowest = std::max({optimizer, update_nvme, h2d, all_gather});
  const double update_sum = optimizer + update_nvme + h2d + all_gather;
  const double groups = static_cast<double>(std::max<int64_t>(plan.placement.num_sub_groups, 1));
  const double update = update_slowest + (update_sum - update_slowest) / groups;
  // The step with `micro` micro-batches, each computing for `compute_each`
  // and transferring for `transfer`. Each phase takes its slowest stage:
  // forward the streamed uploads before the loss (forward_fetch of them),
  // backward the rest. One H2D direction and one set of drives carry all
  // of a step's bytes, so the step is never shorter than either's total.
  // Device collectives: the last micro-batch also carries this rank's part
  // of the sum across, once a step.
  const double once = on_device ? d2h : 0;
  auto step = [&](double compute_each, double micro, double transfer) {
    const double phases =
        std::max({update, forward_share * compute_each, forward_fetch * fetch_each}) +
        std::max({(1 - forward_share) * compute_each, transfer + once,
                  (1 - forward_fetch) * fetch_each}) +
        (micro - 1) * std::max({compute_each, transfer, fetch_each});
    const double link = h2d + micro * fetch_h2d;
    const double drives = update_nvme + micro * fetch_read;
    return std::max({phases, link, drives});
  };
  plan.predicted_step_seconds =
      step(per_micro, k,
           on_device ? reduce_scatter / k : std::max({d2h, accumulate, reduce_scatter}) / k);
  plan.serial_step_seconds =
      compute + d2h + accumulate + reduce_scatter + h2d_params + k * fetch_read + update_sum;

  // Advice: the tokens per step at which compute outlasts the update, and
  // the smallest micro-batch and accumulation that reach them. Accumulating
  // micro-batches helps only while each computes longer than its gradients
  // take to cross and be added in fp32 on the host (they overlap); a larger
  // micro-batch computes longer per transfer, if its activations fit.
  plan.compute_bound = {};
  if (update_slowest <= compute || per_micro <= 0 || plan.tokens_per_step <= 0) return;
  const std::string slowest = update_slowest == optimizer     ? "the CPU optimizer"
                              : update_slowest == update_nvme ? "NVMe I/O"
                              : update_slowest == h2d         ? "the weights' H2D"
                                                              : "the weights' all-gather";
  // Per rank: its sequences, and each micro-batch's transfers.
  const double per_sequence = compute / rank_tokens * static_cast<double>(in.seq_len);
  const auto sequences = static_cast<int64_t>(std::ceil(update_slowest / per_sequence));
  const double d2h_sequence = d2h / k / static_cast<double>(in.micro_batch);
  const double transfer_micro =
      on_device
          ? reduce_scatter / k
          : std::max(d2h / k, dp ? reduce_scatter / k
                                 : Seconds(P * (t + 8.0), bw.host_memory_gb_per_second * 1e9));
  // The micro-batch: as given while it computes longer than a transfer
  // (accumulation then works), else the least that does, else all in one.
  int64_t batch = in.micro_batch;
  if (static_cast<double>(batch) * per_sequence <= transfer_micro) {
    batch = std::min<int64_t>(sequences,
                              static_cast<int64_t>(std::floor(transfer_micro / per_sequence)) + 1);
  }
  batch = std::max<int64_t>(batch, 1);
  const int64_t micro = std::max<int64_t>(1, (sequences + batch - 1) / batch);
  plan.compute_bound.grad_accum = micro;
  plan.compute_bound.tokens_per_step =
      SaturatingMul(SaturatingMul(SaturatingMul(batch, in.seq_len), micro), in.ranks());
  // That step, by the formula above with the new micro-batch's compute.
  const double micro_compute = per_sequence * static_cast<double>(batch);
  const double transfer =
      micro > 1 || dp || on_device ? transfer_micro : d2h_sequence * static_cast<double>(batch);
  plan.compute_bound.step_seconds = step(micro_compute, static_cast<double>(micro), transfer);
  ActivationOptions act;
  act.micro_batch = batch;
  act.seq_len = in.seq_len;
  act.dtype = in.dtype;
  act.checkpointing = in.checkpointing;
  const uint64_t device = plan.device.total_bytes() - plan.activations.total() +
                          ComputeActivationBytes(in.model, act).total();
  char line[768];
  std::snprintf(
      line, sizeof line,
      "%s (%.3g s) is the slowest stage; compute would outlast it from about %lld tokens/step "
      "(now %lld): --micro-batch %lld --grad-accum %lld, a step of about %.3g s, %.0f tokens/s "
      "(now %.0f). The device then needs %.2f GiB of %.2f (%s)%s",
      slowest.c_str(), update_slowest,
      static_cast<long long>(SaturatingMul(SaturatingMul(sequences, in.seq_len), in.ranks())),
      static_cast<long long>(plan.tokens_per_step), static_cast<long long>(batch),
      static_cast<long long>(micro), plan.compute_bound.step_seconds,
      static_cast<double>(plan.compute_bound.tokens_per_step) / plan.compute_bound.step_seconds,
      static_cast<double>(plan.tokens_per_step) / plan.predicted_step_seconds,
      static_cast<double>(device) / (1ull << 30),
      static_cast<double>(plan.device.capacity_bytes) / (1ull << 30),
      device <= plan.device.capacity_bytes ? "fits" : "does not fit",
      dp          ? "; plan with these to see they fit"
      : micro > 1 ? "; the host accumulates in fp32 (4 B/param, pageable): plan with these to see "
                    "they fit"
                  : "");
  plan.compute_bound.advice = line;
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

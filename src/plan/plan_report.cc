// FormatPlanReport: fixed-width text, one section per question the user has
// (what was assumed, what goes where, does it fit, how fast, how big).
#include "plan/plan_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "common/units.h"
#include "plan/param_placement.h"

namespace tierflow {
namespace {

void Appendf(std::string* out, const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  *out += buf;
}

void AppendTier(std::string* out, const TierPlan& tier, const char* title) {
  const uint64_t total = tier.total_bytes();
  Appendf(out, "%s: %s of %s", title, FormatBytes(total).c_str(),
          FormatBytes(tier.capacity_bytes).c_str());
  if (tier.capacity_bytes > 0) {
    Appendf(out, " (%.0f%%)", 100.0 * static_cast<double>(total) / tier.capacity_bytes);
  }
  Appendf(out, "%s\n", total <= tier.capacity_bytes ? "" : "  <-- OVER");
  for (const PlanComponent& c : tier.components) {
    if (c.bytes == 0) continue;
    Appendf(out, "  %-26s %12s  %s\n", c.name.c_str(), FormatBytes(c.bytes).c_str(),
            c.note.c_str());
  }
}

// The working weights' line: resident, or which units stream from where.
void AppendWeights(std::string* out, const PlanInput& in, const Plan& plan) {
  const ParamPlacement& w = plan.placement.params;
  const int64_t units = in.model.n_layers + 2;
  Appendf(out, "weights (%s): ", w.chosen_by_planner ? "planner" : "user");
  if (w.where == ParamOffload::kNone) {
    Appendf(out, "all %lld units resident on the device (%s params)\n",
            static_cast<long long>(units), FormatParamCount(plan.params).c_str());
    return;
  }
  int64_t blocks = 0;
  bool embeddings = false, head = false;
  for (int u : w.streamed_units) {
    if (u == 0)
      embeddings = true;
    else if (u == units - 1)
      head = true;
    else
      ++blocks;
  }
  std::string which =
      std::to_string(blocks) + " of " + std::to_string(in.model.n_layers) + " blocks";
  if (embeddings)
    which += head ? ", the embeddings and the head" : " and the embeddings";
  else if (head)
    which += " and the head";
  Appendf(out, "%zu of %lld units streamed from %s (%s); %s params streamed, %s resident\n",
          w.streamed_units.size(), static_cast<long long>(units),
          w.where == ParamOffload::kHost ? "pinned host memory" : "NVMe", which.c_str(),
          FormatParamCount(w.streamed_params).c_str(), FormatParamCount(w.resident_params).c_str());
  Appendf(out,
          "  %d device slots of %s params (the largest streamed unit), prefetch depth %d; "
          "%s fetched per micro-batch\n",
          w.device_slots, FormatParamCount(w.slot_params).c_str(), w.prefetch_depth,
          FormatBytes(w.fetch_bytes_per_micro_batch).c_str());
}

// What was assumed: the model, the step, the ranks, the hardware.
void AppendSetup(std::string* out, const PlanInput& in, const Plan& plan,
                 const std::vector<std::string>& hardware_notes) {
  const ModelConfig& m = in.model;
  Appendf(out,
          "model     %s: %s, %s params (%lld layers, d_model %lld, %lld heads / %lld kv, "
          "d_ff %lld, vocab %lld%s)\n",
          m.name.c_str(), std::string(ModelFamilyName(m.family)).c_str(),
          FormatParamCount(plan.params).c_str(), static_cast<long long>(m.n_layers),
          static_cast<long long>(m.d_model), static_cast<long long>(m.n_heads),
          static_cast<long long>(m.n_kv_heads), static_cast<long long>(m.d_ff),
          static_cast<long long>(m.vocab_size), m.tie_embeddings ? ", tied head" : "");
  const std::string ranks =
      in.ranks() > 1 ? " x " + std::to_string(in.ranks()) + " ranks" : std::string();
  Appendf(out,
          "training  micro-batch %lld x seq %lld x accumulation %lld%s = %lld tokens/step; "
          "%s; checkpointing %s; %s (%llu B/param of state)\n",
          static_cast<long long>(in.micro_batch), static_cast<long long>(in.seq_len),
          static_cast<long long>(in.grad_accum), ranks.c_str(),
          static_cast<long long>(plan.tokens_per_step), std::string(DTypeName(in.dtype)).c_str(),
          in.checkpointing ? "on" : "off", std::string(OptimizerKindName(in.optimizer)).c_str(),
          static_cast<unsigned long long>(plan.state_bytes_per_param));
  if (in.ranks() > 1) {
    Appendf(out,
            "ranks     %d GPUs per node x %d node%s = %d data-parallel ranks; each owns the "
            "optimizer state of %s params (its part of every unit). Below: device = one GPU, "
            "host and NVMe = one node (its ranks together)\n",
            in.gpus_per_node, in.nodes, in.nodes == 1 ? "" : "s", in.ranks(),
            FormatParamCount(plan.data_parallel.rank_params).c_str());
  }
  Appendf(out, "hardware\n");
  for (const std::string& note : hardware_notes) Appendf(out, "  %s\n", note.c_str());
  *out += "\n";
}

// What goes where, tier by tier.
void AppendTiers(std::string* out, const Plan& plan) {
  AppendTier(out, plan.device, "device");
  AppendTier(out, plan.host, "host");
  // Page-locked memory is the scarce kind (it cannot be swapped or reclaimed,
  // and some systems cap it): shown apart from the pageable rest.
  Appendf(
      out, "  (pinned: %s; pageable: %s)\n", FormatBytes(plan.pinned_bytes).c_str(),
      FormatBytes(plan.host.total_bytes() - std::min(plan.pinned_bytes, plan.host.total_bytes()))
          .c_str());
  AppendTier(out, plan.nvme, "nvme");
  *out += "\n";
}

// Where the step's gradients wait for its decision, what they hold there,
// and what they add to the drives' traffic.
void AppendGradients(std::string* out, const PlanInput& in, const Plan& plan) {
  const Placement& p = plan.placement;
  const Plan::Gradients& g = plan.gradients;
  Appendf(out, "  gradients: %s", std::string(ChoiceName(p.gradients)).c_str());
  if (p.gradients == GradOffload::kNvme) {
    Appendf(out,
            " (%s pinned on the host: %d spill slots and the buckets' staging; %s on the drives; "
            "per step %s written and %s read, %s of NVMe I/O)",
            FormatBytes(g.host_bytes).c_str(), p.grad_spill_slots,
            FormatBytes(g.nvme_bytes).c_str(), FormatBytes(g.nvme_write_bytes_per_step).c_str(),
            FormatBytes(g.nvme_read_bytes_per_step).c_str(),
            FormatSeconds(g.nvme_seconds_per_step).c_str());
  } else {
    Appendf(out, " (%s in host memory: %s; nothing on the drives)",
            FormatBytes(g.host_bytes).c_str(),
            in.ranks() > 1 || in.device_collectives ? "the ranks' sum and its staging"
            : in.grad_accum > 1                     ? "the fp32 accumulator and its staging"
                                                    : "the whole model's D2H landing");
  }
  if (p.gradients_chosen) *out += ", chosen by the planner";
  *out += "\n  engine options: grad_offload=" + std::string(ChoiceName(p.gradients));
  if (p.gradients == GradOffload::kNvme) Appendf(out, " grad_spill_slots=%d", p.grad_spill_slots);
  *out += "\n";
}

// Where the optimizer state and the weights go, and the engine's options.
void AppendPlacement(std::string* out, const PlanInput& in, const Plan& plan) {
  const Placement& p = plan.placement;
  Appendf(out, "placement (%s): optimizer state ", p.chosen_by_planner ? "planner" : "user");
  if (p.where() == "split")
    Appendf(out, "split, ratio %.2f on NVMe", p.nvme_ratio);
  else
    Appendf(out, "on %s", p.where() == "host" ? "host" : "NVMe");
  Appendf(out, "; %s params' state on host, %s on NVMe\n",
          FormatParamCount(p.host_state_params).c_str(),
          FormatParamCount(p.nvme_state_params).c_str());
  const std::string sub_groups =
      p.sub_group_cut == SubGroupCut::kSlices
          ? "of up to " + FormatParamCount(p.sub_group_params) + " params"
      : p.sub_group_params == 0
          ? "of one tensor each (DeepSpeed's rule)"
          : "of whole tensors, at least " + FormatParamCount(p.sub_group_params) +
                " params each (DeepSpeed's rule)";
  Appendf(out,
          "  %lld sub-groups %s (%lld on NVMe), %d staging/I-O slots, "
          "%d gradient buckets of %s params%s\n",
          static_cast<long long>(p.num_sub_groups), sub_groups.c_str(),
          static_cast<long long>(p.nvme_sub_groups), p.buffer_count, p.grad_buckets,
          FormatParamCount(p.grad_bucket_params).c_str(),
          p.vocab_sliced ? " (embedding and LM head in vocabulary slices)" : "");
  const std::string offload(OffloadPlacementName(p.offload()));
  Appendf(out, "  engine options: offload=%s", offload.c_str());
  if (p.offload() == OffloadPlacement::kNvme) Appendf(out, " nvme_ratio=%.2f", p.nvme_ratio);
  Appendf(out,
          " sub_group_params=%lld%s buffer_count=%d grad_buckets=%d grad_bucket_params=%lld"
          " speculation_params=%lld (%s) grad_transfer_dtype=%s\n",
          static_cast<long long>(p.sub_group_params),
          p.sub_group_cut == SubGroupCut::kWholeTensors ? " sub_group_cut=whole_tensors" : "",
          p.buffer_count, p.grad_buckets, static_cast<long long>(p.grad_bucket_params),
          static_cast<long long>(p.speculation_params), p.speculation_from.c_str(),
          std::string(DTypeName(plan.grad_transfer_dtype)).c_str());
  AppendWeights(out, in, plan);
  const ParamPlacement& w = p.params;
  Appendf(out, "  engine options: params.where=%s", std::string(ParamOffloadName(w.where)).c_str());
  if (w.where != ParamOffload::kNone) {
    Appendf(out, " streamed_units=%s device_slots=%d prefetch_depth=%d",
            FormatUnitList(w.streamed_units).c_str(), w.device_slots, w.prefetch_depth);
    if (w.where == ParamOffload::kNvme) Appendf(out, " nvme_staging=%d", w.nvme_staging);
  }
  Appendf(out, "\n  activation checkpoints: %s", std::string(ChoiceName(p.activations)).c_str());
  if (p.activations == ActivationOffload::kHost) {
    Appendf(out, " (%s pinned, %d on the device, %s each way per micro-batch)",
            FormatBytes(plan.activations.host_checkpoints).c_str(), kCheckpointDeviceSlots,
            FormatBytes(plan.activations.checkpoint_transfer).c_str());
  } else {
    *out += " (on the device)";
  }
  if (p.mlp_tile_rows > 0)
    Appendf(out, "; the MLP in tiles of %lld rows", static_cast<long long>(p.mlp_tile_rows));
  if (p.activations_chosen) *out += ", chosen by the planner";
  *out += "\n";
  AppendGradients(out, in, plan);
  *out += "\n";
}

// How fast: the stages, the step, and with several GPUs per node the scaling.
void AppendStepTime(std::string* out, const PlanInput& in, const Hardware& hw, const Plan& plan) {
  Appendf(out, "step time (rates: %s)\n", hw.bandwidths.source.c_str());
  for (const StageTime& s : plan.stages) {
    Appendf(out, "  %-22s %10s  %s\n", s.name.c_str(), FormatSeconds(s.seconds).c_str(),
            s.note.c_str());
  }
  const double tokens_per_second =
      plan.predicted_step_seconds > 0 ? plan.tokens_per_step / plan.predicted_step_seconds : 0;
  Appendf(out, "  step: %s with overlap (%s if serial), %.0f tokens/s, %.3g FLOP/step\n",
          FormatSeconds(plan.predicted_step_seconds).c_str(),
          FormatSeconds(plan.serial_step_seconds).c_str(), tokens_per_second, plan.flops_per_step);
  if (!plan.compute_bound.advice.empty()) {
    Appendf(out, "  advice: %s\n", plan.compute_bound.advice.c_str());
  }
  if (!plan.data_parallel.scaling.empty()) {
    Appendf(out,
            "\nscaling (GPUs per node, %d node%s, the same %lld tokens/step; interconnect: %s)\n",
            in.nodes, in.nodes == 1 ? "" : "s", static_cast<long long>(plan.tokens_per_step),
            plan.data_parallel.interconnect.c_str());
    for (const Plan::DataParallel::Point& p : plan.data_parallel.scaling) {
      Appendf(out, "  %3d GPUs/node  %10.0f tokens/s  step %-9s waits on %s%s\n", p.gpus_per_node,
              p.tokens_per_second, FormatSeconds(p.step_seconds).c_str(), p.slowest.c_str(),
              p.feasible ? "" : "  (does not fit)");
    }
    Appendf(out, "  %s\n", plan.data_parallel.scaling_advice.c_str());
  }
}

}  // namespace

std::string FormatParamCount(int64_t params) {
  const double p = static_cast<double>(params);
  char buf[32];
  if (p >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2f B", p / 1e9);
  else if (p >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.1f M", p / 1e6);
  else if (p >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.1f K", p / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(params));
  return buf;
}

std::string FormatSeconds(double seconds) {
  char buf[32];
  if (seconds < 1e-3)
    std::snprintf(buf, sizeof(buf), "%.0f us", seconds * 1e6);
  else if (seconds < 1)
    std::snprintf(buf, sizeof(buf), "%.0f ms", seconds * 1e3);
  else if (seconds < 600)
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  else if (seconds < 36000)
    std::snprintf(buf, sizeof(buf), "%.1f min", seconds / 60);
  else
    std::snprintf(buf, sizeof(buf), "%.1f h", seconds / 3600);
  return buf;
}

std::string FormatPlanReport(const PlanInput& in, const Hardware& hw, const Plan& plan,
                             const LargestModel* largest,
                             const std::vector<std::string>& hardware_notes,
                             const LongestContext* longest) {
  std::string out;
  AppendSetup(&out, in, plan, hardware_notes);
  AppendTiers(&out, plan);
  Appendf(&out, "verdict: %s\n\n", plan.explanation.c_str());

  AppendPlacement(&out, in, plan);
  AppendStepTime(&out, in, hw, plan);
  const ModelConfig& m = in.model;
  if (largest != nullptr) {
    out += "\n";
    if (largest->params > 0) {
      Appendf(&out, "largest %s that fits with this setup: %s params (%s)\n",
              std::string(ModelFamilyName(m.family)).c_str(),
              FormatParamCount(largest->params).c_str(), largest->description.c_str());
    } else {
      Appendf(&out, "no %s model fits with this setup\n",
              std::string(ModelFamilyName(m.family)).c_str());
    }
  }
  if (longest != nullptr) {
    Appendf(&out,
            "longest context that fits with this setup: %lld tokens with the activation "
            "checkpoints on the device, %lld with them in host memory%s\n",
            static_cast<long long>(longest->on_device), static_cast<long long>(longest->offloaded),
            in.checkpointing ? "" : " (which needs --checkpointing on)");
  }
  return out;
}

}  // namespace tierflow

// `tierflow bench engine`: each stage of one optimizer step alone, then the
// pipelined step, for a synthetic model of a chosen size or a transformer
// (with the planner's predicted step beside the measurement).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/engine_bench.h"
#include "bench/engine_bench_params.h"
#include "common/grad_offload.h"
#include "common/trace.h"
#include "common/units.h"
#include "io/json_util.h"
#include "io/trace_file.h"
#include "tierflow/grad_transfer.h"
#include "tierflow/param_offload.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

struct EngineBenchFlags {
  DeviceFlags device;
  std::string model;  // "" = synthetic
  int micro_batch = 4;
  int seq_len = 2048;
  bool no_checkpointing = false;
  std::string offload_activations = "none";
  std::string offload_gradients = "host";
  std::string speculation;  // "" = the engine's default
  std::string grad_bucket;  // "" = the largest unit
  std::string params = "64Mi";
  int units = 16;
  int tokens = 512;
  int steps = 4;
  int rounds = 3;
  std::string offload = "host";
  std::string offload_param = "none";
  int param_slots = 3;
  bool param_slots_given = false;  // set from the option's count after parsing
  std::string streamed_units;      // "" = every other block
  std::vector<std::string> nvme_paths;
  bool nvme_buffered = false;
  std::string pipeline = "overlapped";
  std::string dtype = "bf16";
  std::string grad_transfer_dtype;  // "" = the default for --dtype
  std::string sub_group = "4Mi";
  int buffer_count = 4;
  float clip = 0;
  std::string trace_path;
  bool json = false;
};

// A count flag (ParseCount), its error naming the flag.
StatusOr<uint64_t> CountFlag(const std::string& name, const std::string& text) {
  auto n = ParseCount(text);
  if (!n.ok()) return n.status().WithContext(name);
  return n;
}

// The parameter placement the bench ran, under the model line.
void PrintStreaming(const EngineBenchResult& r) {
  const ParamStreaming& ps = r.param_streaming;
  if (ps.where == ParamOffload::kNone) return;
  std::string units;
  for (int u : ps.streamed_units) units += (units.empty() ? "" : ",") + std::to_string(u);
  std::printf(
      "parameters: %zu units streamed from %s (%s; %llu params, %.0f%%), %d device slots, "
      "prefetch %d\n",
      ps.streamed_units.size(), std::string(ParamOffloadName(ps.where)).c_str(), units.c_str(),
      static_cast<unsigned long long>(r.streamed_params),
      100.0 * static_cast<double>(r.streamed_params) / static_cast<double>(r.params),
      ps.device_slots, ps.prefetch_depth);
}

// --offload-param and what goes with it: the ring of device slots and the
// streamed units.
Status ParamFlags(const EngineBenchFlags& f, ParamStreaming& params) {
  TF_ASSIGN_OR_RETURN(params.where, ParseParamOffload("--offload-param", f.offload_param));
  if (params.where == ParamOffload::kNone) {
    if (f.param_slots_given) {
      return InvalidArgumentError(
          "--param-slots: nothing streams with --offload-param none; add --offload-param host or "
          "nvme");
    }
  } else {
    params.device_slots = f.param_slots;
    params.prefetch_depth = f.param_slots - 1;
  }
  if (!f.streamed_units.empty()) {
    TF_ASSIGN_OR_RETURN(params.streamed_units, ParseUnitList("--streamed-units", f.streamed_units));
  }
  return Status::Ok();
}

// The engine's options from the flags: placement, pipeline, dtypes, sizes.
Status EngineFlags(const EngineBenchFlags& f, EngineBenchOptions& o) {
  TF_ASSIGN_OR_RETURN(o.engine.offload, ParseOffloadPlacement("--offload-optimizer", f.offload));
  if (o.engine.offload == OffloadPlacement::kAuto) {
    // The bench measures one fixed placement; choosing one is the planner's job.
    return InvalidArgumentError(
        "--offload-optimizer: auto is not supported here; use host or nvme");
  }
  TF_RETURN_IF_ERROR(ParamFlags(f, o.engine.params));
  o.engine.nvme_paths = f.nvme_paths;
  o.engine.nvme_buffered = f.nvme_buffered;
  o.engine.pipeline = f.pipeline == "sync" ? Pipeline::kSynchronous : Pipeline::kOverlapped;
  TF_ASSIGN_OR_RETURN(o.engine.weights_dtype, ParseDType(f.dtype));
  if (!f.grad_transfer_dtype.empty()) {
    auto t = ParseDType(f.grad_transfer_dtype);
    if (!t.ok()) return t.status().WithContext("--grad-transfer-dtype");
    o.engine.grad_transfer_dtype = *t;
  }
  TF_ASSIGN_OR_RETURN(o.engine.sub_group_params, CountFlag("--sub-group-size", f.sub_group));
  o.engine.buffer_count = f.buffer_count;
  if (!f.speculation.empty()) {
    if (o.engine.pipeline == Pipeline::kSynchronous) {
      return InvalidArgumentError(
          "--speculation: the sync pipeline does not speculate; drop it or use --pipeline "
          "overlapped");
    }
    TF_ASSIGN_OR_RETURN(o.engine.speculation_params, CountFlag("--speculation", f.speculation));
  }
  if (!f.grad_bucket.empty()) {
    TF_ASSIGN_OR_RETURN(o.engine.grad_bucket_params, CountFlag("--grad-bucket", f.grad_bucket));
  }
  o.engine.clip_grad_norm = f.clip;
  auto grads = ParseChoice<GradOffload>(f.offload_gradients);
  if (!grads.ok()) return grads.status().WithContext("--offload-gradients");
  if (*grads == GradOffload::kAuto) {
    return InvalidArgumentError(
        "--offload-gradients: auto is not supported here; use host or nvme");
  }
  if (*grads == GradOffload::kNvme && o.engine.offload != OffloadPlacement::kNvme) {
    return InvalidArgumentError(
        "--offload-gradients nvme puts the gradients beside the optimizer state: add "
        "--offload-optimizer nvme");
  }
  o.engine.grad_offload = *grads;
  return Status::Ok();
}

StatusOr<EngineBenchOptions> OptionsFromFlags(const EngineBenchFlags& f) {
  EngineBenchOptions o;
  o.model = f.model;
  o.micro_batch = f.micro_batch;
  o.seq_len = f.seq_len;
  o.checkpointing = !f.no_checkpointing;
  o.offload_checkpoints = f.offload_activations == "host";
  TF_ASSIGN_OR_RETURN(o.params, CountFlag("--params", f.params));
  o.units = f.units;
  o.tokens = f.tokens;
  o.steps = f.steps;
  o.rounds = f.rounds;
  TF_RETURN_IF_ERROR(EngineFlags(f, o));
  if (o.engine.offload == OffloadPlacement::kNvme && f.nvme_paths.empty()) {
    return InvalidArgumentError("--offload-optimizer nvme needs --nvme-path DIR");
  }
  return o;
}

// What the run was, as the report names it.
struct RunLabels {
  std::string offload;   // the optimizer state's tier
  std::string transfer;  // the gradients' dtype across PCIe
};

nlohmann::json RoundsJson(const EngineBenchResult& r) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const EngineBenchRound& round : r.rounds) {
    const double ratio = round.step_seconds / round.slowest_stage_seconds;
    rounds.push_back({{"stages", round.stage_seconds},
                      {"slowest_stage", round.slowest_stage},
                      {"slowest_stage_seconds", round.slowest_stage_seconds},
                      {"step_seconds", round.step_seconds},
                      {"step_to_slowest_stage", ratio}});
  }
  return rounds;
}

nlohmann::json ResultJson(const EngineBenchFlags& f, const Device& device, const RunLabels& labels,
                          const EngineBenchResult& r) {
  nlohmann::json j = {
      {"device", device.description()},
      {"model", r.model},
      {"params", r.params},
      {"tokens", r.tokens_per_step},
      {"offload", labels.offload},
      {"pipeline", f.pipeline},
      {"grad_transfer_dtype", labels.transfer},
      {"gradients", f.offload_gradients},
      {"d2h_bytes_per_param", r.d2h_bytes_per_param},
      {"h2d_bytes_per_param", r.h2d_bytes_per_param},
      {"step_seconds", r.step_seconds},
      {"slowest_stage", r.slowest_stage},
      {"slowest_stage_seconds", r.slowest_stage_seconds},
      {"step_to_slowest_stage", r.step_seconds / r.slowest_stage_seconds},
      {"median_round_step_to_slowest_stage", r.median_round_ratio},
      {"overlap_efficiency", r.overlap_efficiency},
      {"stages", r.stage_seconds},
      {"rounds", RoundsJson(r)},
      {"engine_stage_busy_seconds", r.engine_stats.stage_seconds},
      {"speculated_groups", r.engine_stats.speculated_groups},
      {"rolled_back", r.engine_stats.rolled_back},
      {"nvme_read_bytes", r.engine_stats.nvme_read_bytes},
      {"nvme_written_bytes", r.engine_stats.nvme_written_bytes},
      {"offload_param", std::string(ParamOffloadName(r.param_streaming.where))},
  };
  const ParamStreaming& ps = r.param_streaming;
  if (ps.where != ParamOffload::kNone) {
    // The ring, and the bytes it moved.
    j.update({{"streamed_units", ps.streamed_units},
              {"streamed_params", r.streamed_params},
              {"param_slots", ps.device_slots},
              {"prefetch_depth", ps.prefetch_depth}});
    const double per_param = static_cast<double>(r.param_h2d_bytes) / static_cast<double>(r.params);
    j.update({{"param_h2d_bytes", r.param_h2d_bytes},
              {"param_nvme_read_bytes", r.param_nvme_read_bytes},
              {"param_stage_h2d_bytes", r.param_stage_h2d_bytes},
              {"param_h2d_bytes_per_param", per_param}});
  }
  if (r.has_prediction) {
    nlohmann::json stages = nlohmann::json::object();
    for (const StageTime& st : r.prediction.stages) stages[st.name] = st.seconds;
    j["predicted"] = {{"step_seconds", r.prediction.step_seconds},
                      {"predicted_to_measured", r.prediction.step_seconds / r.step_seconds},
                      {"stages", stages},
                      {"basis", r.prediction.basis}};
  }
  return j;
}

// Each stage alone and the pipelined step, per round and the best.
void PrintStageTable(const EngineBenchResult& r) {
  std::printf("%-12s", "stage alone");
  for (size_t i = 0; i < r.rounds.size(); ++i) std::printf("  round %zu", i + 1);
  std::printf("      best\n");
  for (const auto& [stage, seconds] : r.stage_seconds) {
    std::printf("%-12s", stage.c_str());
    for (const EngineBenchRound& round : r.rounds)
      std::printf(" %8.4f", round.stage_seconds.at(stage));
    std::printf(" %9.4f%s\n", seconds, stage == r.slowest_stage ? "  (slowest)" : "");
  }
  std::printf("%-12s", "pipelined");
  for (const EngineBenchRound& round : r.rounds) std::printf(" %8.4f", round.step_seconds);
  std::printf(" %9.4f\n%-12s", r.step_seconds, "ratio");
  for (const EngineBenchRound& round : r.rounds) {
    std::printf(" %8.2f", round.step_seconds / round.slowest_stage_seconds);
  }
}

// The bytes across PCIe per step, the streamed weights' apart.
void PrintTransfers(const EngineBenchResult& r) {
  std::printf(
      "across PCIe per step: %.2f B/param D2H (gradients, with their statistics), %.2f B/param H2D "
      "(weights",
      r.d2h_bytes_per_param, r.h2d_bytes_per_param);
  if (r.param_streaming.where == ParamOffload::kNone) {
    std::printf(")\n");
    return;
  }
  const double p = static_cast<double>(r.params);
  std::printf(": %.2f updated, %.2f streamed)\n",
              r.h2d_bytes_per_param - static_cast<double>(r.param_h2d_bytes) / p,
              static_cast<double>(r.param_h2d_bytes) / p);
  std::printf("streamed weights per step: %s uploaded (%s in the h2d_params stage alone)",
              FormatBytes(r.param_h2d_bytes).c_str(), FormatBytes(r.param_stage_h2d_bytes).c_str());
  if (r.param_streaming.where == ParamOffload::kNvme) {
    std::printf(", %s read from NVMe", FormatBytes(r.param_nvme_read_bytes).c_str());
  }
  std::printf("\n");
}

void PrintResult(const EngineBenchFlags& f, const Device& device, const RunLabels& labels,
                 const EngineBenchResult& r) {
  std::printf(
      "device: %s\nmodel: %s, %llu params, %lld tokens per step, %s weights (%s gradients across "
      "PCIe), state on %s, gradients on %s, %s pipeline\n",
      device.description().c_str(), r.model.c_str(), static_cast<unsigned long long>(r.params),
      static_cast<long long>(r.tokens_per_step), f.dtype.c_str(), labels.transfer.c_str(),
      labels.offload.c_str(), f.offload_gradients.c_str(), f.pipeline.c_str());
  PrintStreaming(r);
  std::printf("\n");
  PrintStageTable(r);
  std::printf(
      "\n\npipelined step (best round): %.4f s = %.2f x the slowest stage (best alone); "
      "median over rounds %.2f x; overlap efficiency %.0f%%\n",
      r.step_seconds, r.step_seconds / r.slowest_stage_seconds, r.median_round_ratio,
      100 * r.overlap_efficiency);
  PrintTransfers(r);
  if (r.has_prediction) {
    std::printf("\nplanner's prediction for the same inputs: %.4f s per step = %.2f x measured\n",
                r.prediction.step_seconds, r.prediction.step_seconds / r.step_seconds);
    for (const StageTime& st : r.prediction.stages) {
      std::printf("  %-16s %9.4f  %s\n", st.name.c_str(), st.seconds, st.note.c_str());
    }
    std::printf("  (%s)\n", r.prediction.basis.c_str());
  }
  if (r.engine_stats.rolled_back)
    std::printf("(speculation was rolled back: clipping triggered)\n");
}

Status Run(const EngineBenchFlags& f, Device& device) {
  TF_ASSIGN_OR_RETURN(EngineBenchOptions o, OptionsFromFlags(f));
  const RunLabels labels{std::string(OffloadPlacementName(o.engine.offload)),
                         std::string(DTypeName(GradTransferDType(o.engine.weights_dtype,
                                                                 o.engine.grad_transfer_dtype)))};
  TraceRecorder trace;
  if (!f.trace_path.empty()) {
    trace.SetEnabled(true);
    o.engine.trace = &trace;
  }
  // Flag mistakes before any directory is made or model built.
  TF_RETURN_IF_ERROR(CheckBenchStreaming(o.engine.params, o.engine.nvme_paths));
  for (const std::string& p : f.nvme_paths) std::filesystem::create_directories(p);
  TF_ASSIGN_OR_RETURN(EngineBenchResult r, RunEngineBench(device, o));
  if (!f.trace_path.empty()) TF_RETURN_IF_ERROR(WriteTraceFile(trace, f.trace_path));
  if (f.json) {
    std::printf("%s\n", JsonOutput(ResultJson(f, device, labels, r)).c_str());
  } else {
    PrintResult(f, device, labels, r);
  }
  return Status::Ok();
}

}  // namespace

void AddBenchEngine(CLI::App& bench, int* exit_code) {
  auto f = std::make_shared<EngineBenchFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "engine",
      "One optimizer step (synthetic model or --model): each stage alone, then pipelined");
  f->device.Add(*cmd);
  CLI::Option* model =
      cmd->add_option("--model", f->model,
                      "A transformer instead of the synthetic model: a preset, a directory with "
                      "config.json, or a config.json (random weights); the planner's prediction "
                      "is reported beside it");
  auto synthetic = [&](CLI::Option* opt) { return opt->capture_default_str()->excludes(model); };
  synthetic(cmd->add_option("--params", f->params,
                            std::string("Synthetic model: total parameters, e.g. 64M or 1e9 (") +
                                kCountSuffixHelp + ")")
                ->check(CountAtLeast(1)));
  synthetic(cmd->add_option("--units", f->units, "Synthetic model: number of equal units")
                ->check(AtLeast(1)));
  synthetic(cmd->add_option("--tokens", f->tokens, "Synthetic model: tokens per micro-batch")
                ->check(AtLeast(1)));
  cmd->add_option("--micro-batch", f->micro_batch, "--model: sequences per step")
      ->check(AtLeast(1))
      ->capture_default_str()
      ->needs(model);
  cmd->add_option("--seq-len", f->seq_len, "--model: tokens per sequence")
      ->check(AtLeast(2))
      ->capture_default_str()
      ->needs(model);
  cmd->add_flag("--no-checkpointing", f->no_checkpointing,
                "--model: keep every activation instead of recomputing each block in backward")
      ->needs(model);
  cmd->add_option("--offload-gradients", f->offload_gradients,
                  "Where the step's gradients wait for the update: host (the whole model's in "
                  "host memory) | nvme (bounded pinned slots, each sub-group's on the drives "
                  "beside its state; needs --offload-optimizer nvme)")
      ->capture_default_str();
  cmd->add_option("--offload-activations", f->offload_activations,
                  "--model: the activation checkpoints on the device (none) or in pinned host "
                  "memory with a ring of three on the device (host; needs checkpointing)")
      ->check(CLI::IsMember({"none", "host"}))
      ->capture_default_str()
      ->needs(model);
  cmd->add_option("--speculation", f->speculation,
                  "Parameters the optimizer may update during backward (default: the engine's, "
                  "256Mi)")
      ->check(CountAtLeast(0));
  cmd->add_option("--grad-bucket", f->grad_bucket,
                  "Parameters per gradient bucket (default: the largest unit; smaller ones cut "
                  "units into pieces, the vocabulary matrices into slices)")
      ->check(CountAtLeast(1));
  cmd->add_option("--steps", f->steps, "Timed steps per round, back to back, after a warm-up")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option(
         "--rounds", f->rounds,
         "Rounds of (each stage alone, then the pipelined steps); the best of each is reported")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--offload-optimizer", f->offload, "Where optimizer state lives: host | nvme")
      ->capture_default_str();
  cmd->add_option("--nvme-path", f->nvme_paths,
                  "Directory for NVMe state and streamed weights (repeat per drive)");
  cmd->add_option("--offload-param", f->offload_param,
                  "Parameter offload: none | host (or cpu) | nvme: the streamed units' weights "
                  "live there and are uploaded into device slots ahead of use")
      ->capture_default_str();
  CLI::Option* slots =
      cmd->add_option("--param-slots", f->param_slots,
                      "--offload-param host|nvme: device slots of the ring (>= 2; prefetch depth "
                      "= slots - 1)")
          ->check(AtLeast(2))
          ->capture_default_str();
  cmd->add_option("--streamed-units", f->streamed_units,
                  "--offload-param host|nvme: unit indices to stream, e.g. 2,4,6 or 1-3,8 "
                  "(default: every other block, the second, fourth, ...)");
  cmd->add_flag("--nvme-buffered", f->nvme_buffered,
                "Buffered I/O (file systems without O_DIRECT)");
  cmd->add_option("--pipeline", f->pipeline, "overlapped | sync")
      ->check(CLI::IsMember({"overlapped", "sync"}))
      ->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "Working weights: bf16 | fp16 | fp32")
      ->capture_default_str();
  cmd->add_option("--grad-transfer-dtype", f->grad_transfer_dtype,
                  "Gradients across PCIe: bf16 | fp16 | fp32 (default: --dtype when 16-bit, "
                  "else fp32)");
  cmd->add_option("--sub-group-size", f->sub_group,
                  std::string("Parameters per optimizer sub-group (") + kCountSuffixHelp + ")")
      ->check(CountAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--buffer-count", f->buffer_count, "NVMe slots / staging buffers")
      ->check(AtLeast(2))
      ->capture_default_str();
  cmd->add_option("--clip", f->clip, "Global-norm clipping threshold (0 = off)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--trace", f->trace_path, "Write a Chrome trace of the run to FILE");
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->callback([f, exit_code, slots] {
    f->param_slots_given = slots->count() > 0;
    std::unique_ptr<Device> device = f->device.CreateOrReport();
    if (!device) {
      *exit_code = 1;
      return;
    }
    Status s = Run(*f, *device);
    if (!s.ok()) {
      std::fprintf(stderr, "tierflow bench engine: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli

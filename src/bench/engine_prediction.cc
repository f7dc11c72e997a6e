// Planner inputs from a bench run's measurements.
#include "bench/engine_prediction.h"

#include <algorithm>
#include <vector>

#include "plan/memory_model.h"
#include "plan/step_time.h"
#include "tierflow/grad_transfer.h"

namespace tierflow {
namespace {

// bytes / seconds in GB/s.
double GbPerSecond(double bytes, double seconds) { return bytes / seconds / 1e9; }

std::string UnitList(std::vector<int> units) {
  std::sort(units.begin(), units.end());
  std::string s;
  for (int u : units) s += (s.empty() ? "" : ",") + std::to_string(u);
  return s;
}

bool Positive(const std::map<std::string, double>& stages, const std::string& name) {
  auto it = stages.find(name);
  return it != stages.end() && it->second > 0;
}

}  // namespace

StatusOr<EngineBenchPrediction> PredictEngineStep(const Device& device, const ModelConfig& config,
                                                  const EngineBenchOptions& o, uint64_t params,
                                                  uint64_t resident_params,
                                                  const std::map<std::string, double>& stages,
                                                  uint64_t param_stage_bytes) {
  const EngineOptions& eo = o.engine;
  const bool nvme = eo.offload == OffloadPlacement::kNvme;
  const ParamStreaming& ps = eo.params;
  const bool streams = ps.where != ParamOffload::kNone;
  std::vector<std::string> needed = {"compute", "d2h", "optimizer"};
  if (resident_params > 0) needed.push_back("h2d");
  if (streams) needed.push_back("h2d_params");
  if (nvme) needed.push_back("nvme");
  for (const std::string& name : needed) {
    if (!Positive(stages, name)) {
      return InternalError("bench engine: no measured time for stage " + name);
    }
  }
  if (streams && param_stage_bytes == 0) {
    return InternalError("bench engine: no bytes for the h2d_params stage");
  }
  PlanInput in;
  in.model = config;
  in.micro_batch = o.micro_batch;
  in.seq_len = o.seq_len;
  in.grad_accum = 1;
  in.dtype = eo.weights_dtype;
  in.grad_transfer_dtype = GradTransferDType(eo.weights_dtype, eo.grad_transfer_dtype);
  in.checkpointing = o.checkpointing;
  in.offload_activations =
      o.offload_checkpoints ? ActivationOffload::kHost : ActivationOffload::kNone;
  in.offload = nvme ? OffloadPlacement::kNvme : OffloadPlacement::kHost;
  // Where the engine keeps the gradients (the planner's auto is not asked).
  in.offload_gradients =
      eo.grad_offload == GradOffload::kNvme ? GradOffload::kNvme : GradOffload::kHost;
  in.grad_spill_slots = eo.grad_spill_slots;
  in.nvme_ratio = nvme ? eo.nvme_ratio : 0.0;
  in.sub_group_params = static_cast<int64_t>(eo.sub_group_params);
  in.buffer_count = eo.buffer_count;
  in.grad_buckets = eo.grad_buckets;
  if (eo.grad_bucket_params != 0) {
    in.grad_bucket_params = static_cast<int64_t>(eo.grad_bucket_params);
  }
  in.pipeline =
      eo.pipeline == Pipeline::kOverlapped ? PipelineKind::kOverlapped : PipelineKind::kSynchronous;
  if (eo.pipeline == Pipeline::kOverlapped) {
    in.speculation_params = static_cast<int64_t>(eo.speculation_params);
  }
  in.nvme_directories = static_cast<int>(std::max<size_t>(1, eo.nvme_paths.size()));
  in.param_offload = streams ? ps.where : ParamOffload::kNone;
  if (streams) in.param_slots = ps.device_slots;

  // Capacities far above the run: only the time is wanted here.
  Hardware hw;
  hw.device_is_gpu = device.kind() != DeviceKind::kCpu;
  hw.device_description = device.description();
  hw.device_memory_bytes = uint64_t{1} << 50;
  hw.host_memory_bytes = uint64_t{1} << 50;
  hw.nvme_capacity_bytes = uint64_t{1} << 50;
  hw.cores = 1;
  const double P = static_cast<double>(params);
  const double a = static_cast<double>(DTypeSize(in.dtype));
  const double t = static_cast<double>(DTypeSize(*in.grad_transfer_dtype));
  Bandwidths& bw = hw.bandwidths;
  // The link's rate from the resident units' updates alone, or (every unit
  // streamed) from the streamed uploads alone.
  bw.h2d_gb_per_second =
      resident_params > 0
          ? GbPerSecond(static_cast<double>(resident_params) * a, stages.at("h2d"))
          : GbPerSecond(static_cast<double>(param_stage_bytes), stages.at("h2d_params"));
  bw.d2h_gb_per_second = GbPerSecond(P * t, stages.at("d2h"));
  // One micro-batch: no host pass over the gradients (AccumulateBytesPerParam
  // is 0), so no host-memory rate enters the prediction.
  bw.host_memory_gb_per_second = 1;
  bw.adam_params_per_second = P / stages.at("optimizer");
  if (nvme) {
    // The planner adds a read and a write of the AdamW state (the bench's
    // optimizer); the stage did both.
    const double state =
        static_cast<double>(OptimizerStateBytesPerParam(OptimizerMomentCount(in.optimizer)));
    const double rate = GbPerSecond(2.0 * state * P, stages.at("nvme"));
    bw.nvme_read_gb_per_second = rate;
    bw.nvme_write_gb_per_second = rate;
  } else if (ps.where == ParamOffload::kNvme) {
    // Only weights on NVMe: the ring's reads alone paced the h2d_params stage.
    const double rate =
        GbPerSecond(static_cast<double>(param_stage_bytes), stages.at("h2d_params"));
    bw.nvme_read_gb_per_second = rate;
    bw.nvme_write_gb_per_second = rate;
  } else {
    bw.nvme_read_gb_per_second = bw.nvme_write_gb_per_second = 1;  // unused: nothing on NVMe
  }
  EngineBenchPrediction p;
  if (const SimProfile* sim = device.sim_profile()) {
    bw.device_tflops = sim->tensor_tflops;
    bw.device_efficiency = sim->tensor_efficiency;
    p.basis =
        "host, link and NVMe rates measured alone in this run; compute from sim:" + sim->name +
        "'s tensor peak x efficiency and the planner's FLOP count";
  } else {
    const double flops = TrainingFlopsPerToken(config, o.seq_len, o.checkpointing) *
                         static_cast<double>(o.micro_batch) * o.seq_len;
    bw.device_tflops = flops / stages.at("compute") / 1e12;
    bw.device_efficiency = 1.0;
    p.basis = "every stage's rate measured alone in this run (this device has no published peak)";
  }
  bw.source = "bench engine";
  TF_ASSIGN_OR_RETURN(Plan plan, ComputePlan(in, hw));
  p.step_seconds = plan.predicted_step_seconds;
  if (streams) {
    const std::string planner = UnitList(plan.placement.params.streamed_units);
    const std::string bench = UnitList(ps.streamed_units);
    p.basis += planner == bench ? "; the planner streams the bench's units (" + bench + ")"
                                : "; the planner streams units " + planner +
                                      " of its own choosing, the bench " + bench;
  }
  p.stages = plan.stages;
  return p;
}

}  // namespace tierflow

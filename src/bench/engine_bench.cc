// Stage-alone measurements and the pipelined step of `tierflow bench engine`.
#include "bench/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "bench/synthetic_model.h"
#include "common/half.h"
#include "engine/nvme_state_tier.h"
#include "engine/offload_engine.h"
#include "kernels/pointwise.h"
#include "optim/adam.h"
#include "optim/grad_stats.h"
#include "tierflow/grad_transfer.h"

namespace tierflow {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Hands the model plain buffers: the compute stage alone, nothing streamed.
// With a 16-bit transfer dtype each unit's gradients are cast for D2H on the
// compute stream, as the engine does.
class LocalAccess : public UnitAccess {
 public:
  LocalAccess(Stream& stream, char* weights, uint64_t unit_params, DType weights_dtype,
              float* grads, DType transfer, void* wire)
      : stream_(stream),
        weights_(weights),
        unit_params_(unit_params),
        weights_dtype_(weights_dtype),
        grads_(grads),
        transfer_(transfer),
        wire_(wire) {}
  StatusOr<void*> Weights(int unit) override {
    return static_cast<void*>(weights_ + unit * unit_params_ * DTypeSize(weights_dtype_));
  }
  StatusOr<float*> BeginGrads(int unit) override { return grads_; }
  Status EndGrads(int unit) override {
    if (transfer_ == DType::kF32) return Status::Ok();
    return Cast(stream_, DType::kF32, grads_, transfer_, wire_, static_cast<int64_t>(unit_params_));
  }

 private:
  Stream& stream_;
  char* weights_;
  uint64_t unit_params_;
  DType weights_dtype_;
  float* grads_;
  DType transfer_;
  void* wire_;
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// Compute (forward + backward), D2H and H2D alone, on plain device buffers.
Status MeasureDeviceStages(Device& device, SyntheticModel& model, const SubGroupLayout& layout,
                           const EngineOptions& eo, std::map<std::string, double>* out) {
  const std::vector<UnitInfo> units = model.Units();
  const uint64_t total = layout.total_params, unit_params = units[0].num_params;
  const size_t wbytes = DTypeSize(eo.weights_dtype);
  const DType transfer = GradTransferDType(eo.weights_dtype, eo.grad_transfer_dtype);
  const size_t tbytes = DTypeSize(transfer);
  TF_ASSIGN_OR_RETURN(auto stream, device.CreateStream("bench"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer weights, device.Allocate(total * wbytes, "bench weights"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer grads, device.Allocate(unit_params * 4, "bench grads"));
  DeviceBuffer wire;
  if (transfer != DType::kF32) {
    TF_ASSIGN_OR_RETURN(wire, device.Allocate(unit_params * tbytes, "bench gradient cast"));
  }
  const void* d2h_source = transfer != DType::kF32 ? wire.data() : grads.data();
  TF_ASSIGN_OR_RETURN(PinnedBuffer host_grads,
                      device.AllocatePinned(unit_params * tbytes, "bench"));
  TF_ASSIGN_OR_RETURN(PinnedBuffer host_weights,
                      device.AllocatePinned(layout.max_group_params * wbytes, "bench"));
  TF_RETURN_IF_ERROR(stream->Memset(weights.data(), 0, total * wbytes));
  TF_RETURN_IF_ERROR(stream->Memset(grads.data(), 0, unit_params * 4));
  LocalAccess access(*stream, static_cast<char*>(weights.data()), unit_params, eo.weights_dtype,
                     grads.as<float>(), transfer, wire.data());
  TF_RETURN_IF_ERROR(model.ForwardBackward(*stream, MicroBatch{}, 1.0f, access));  // warm-up
  TF_RETURN_IF_ERROR(stream->Synchronize());
  auto t0 = Clock::now();
  TF_RETURN_IF_ERROR(model.ForwardBackward(*stream, MicroBatch{}, 1.0f, access));
  TF_RETURN_IF_ERROR(stream->Synchronize());
  (*out)["compute"] = Since(t0);
  t0 = Clock::now();
  for (size_t u = 0; u < units.size(); ++u) {
    TF_RETURN_IF_ERROR(
        stream->CopyDeviceToHost(host_grads.data(), d2h_source, unit_params * tbytes));
  }
  TF_RETURN_IF_ERROR(stream->Synchronize());
  (*out)["d2h"] = Since(t0);
  t0 = Clock::now();
  for (const SubGroup& g : layout.groups) {
    TF_RETURN_IF_ERROR(
        stream->CopyHostToDevice(static_cast<char*>(weights.data()) + g.global_offset * wbytes,
                                 host_weights.data(), g.num_params * wbytes));
  }
  TF_RETURN_IF_ERROR(stream->Synchronize());
  (*out)["h2d"] = Since(t0);
  return Status::Ok();
}

// The host side alone: accumulation (from the transfer dtype) + norm per
// unit, then AdamW over every sub-group.
Status MeasureHostStages(const std::vector<UnitInfo>& units, const SubGroupLayout& layout,
                         const EngineOptions& eo, std::map<std::string, double>* out) {
  const uint64_t total = layout.total_params, unit_params = units[0].num_params;
  const size_t wbytes = DTypeSize(eo.weights_dtype);
  const DType transfer = GradTransferDType(eo.weights_dtype, eo.grad_transfer_dtype);
  std::unique_ptr<float, FreeDeleter> acc(static_cast<float*>(std::aligned_alloc(64, total * 4)));
  std::unique_ptr<float, FreeDeleter> grad(
      static_cast<float*>(std::aligned_alloc(64, unit_params * 4)));
  std::unique_ptr<float, FreeDeleter> state(
      static_cast<float*>(std::aligned_alloc(64, 3 * total * 4)));
  std::vector<char> weights_out(layout.max_group_params * wbytes);
  if (!acc || !grad || !state) return OutOfMemoryError("bench engine: host buffers");
  std::fill(grad.get(), grad.get() + unit_params, 1e-3f);
  // The transfer dtype's values in place (a 16-bit span fits in the fp32 one).
  std::vector<float> widened(grad.get(), grad.get() + unit_params);
  ConvertBuffer(DType::kF32, widened.data(), transfer, grad.get(), unit_params);
  std::memset(state.get(), 0, 3 * total * 4);
  std::memset(acc.get(), 0, total * 4);
  auto t0 = Clock::now();
  for (size_t u = 0; u < units.size(); ++u) {
    TF_RETURN_IF_ERROR(AccumulateGradsWithStats(acc.get() + layout.unit_offsets[u], grad.get(),
                                                transfer, unit_params, true)
                           .status());
  }
  (*out)["accumulate"] = Since(t0);
  t0 = Clock::now();
  for (const SubGroup& g : layout.groups) {
    OptimSpans spans;
    spans.params = state.get() + g.global_offset;
    spans.exp_avg = state.get() + total + g.global_offset;
    spans.exp_avg_sq = state.get() + 2 * total + g.global_offset;
    spans.grads = acc.get() + g.global_offset;
    spans.grad_dtype = DType::kF32;
    spans.out = weights_out.data();
    spans.out_dtype = eo.weights_dtype;
    spans.n = g.num_params;
    TF_RETURN_IF_ERROR(AdamStep(eo.adam, AdamStepArgs{}, spans).status());
  }
  (*out)["optimizer"] = Since(t0);
  return Status::Ok();
}

// NVMe state I/O alone: read and write every sub-group through the same tier
// (slots, read-ahead, write-behind) the engine uses.
Status MeasureNvmeStage(Device& device, const SubGroupLayout& layout, const EngineOptions& eo,
                        std::map<std::string, double>* out) {
  std::vector<int> all(layout.groups.size());
  for (size_t g = 0; g < all.size(); ++g) all[g] = static_cast<int>(g);
  NvmeTierOptions no;
  no.paths = eo.nvme_paths;
  no.buffered = eo.nvme_buffered;
  no.slots = eo.buffer_count;
  no.two_copies = eo.pipeline == Pipeline::kOverlapped;
  TF_ASSIGN_OR_RETURN(auto tier, NvmeStateTier::Create(layout, all, no, device));
  std::vector<float> zeros(layout.max_group_params, 0.0f);
  for (int g : all) TF_RETURN_IF_ERROR(tier->Write(g, zeros.data(), nullptr, nullptr));
  auto t0 = Clock::now();
  for (size_t g = 0; g < all.size(); ++g) {
    for (size_t a = g; a < std::min(all.size(), g + eo.buffer_count - 1); ++a) {
      TF_RETURN_IF_ERROR(tier->Prefetch(static_cast<int>(a)));
    }
    TF_RETURN_IF_ERROR(tier->Acquire(static_cast<int>(g)).status());
    TF_RETURN_IF_ERROR(tier->Release(static_cast<int>(g), /*modified=*/true));
  }
  TF_RETURN_IF_ERROR(tier->Flush());
  (*out)["nvme"] = Since(t0);
  return Status::Ok();
}

// The pipelined step through a fresh engine, in steady state: one warm-up
// step, then `steps` steps back to back (each step's optimizer overlaps the
// next forward), timed until every update has landed, per step.
Status MeasurePipelined(Device& device, SyntheticModel& model, const EngineBenchOptions& options,
                        double* step_seconds, StepStats* last) {
  TF_ASSIGN_OR_RETURN(auto engine, OffloadEngine::Create(device, model, options.engine));
  std::vector<MicroBatch> batch(1);
  TF_RETURN_IF_ERROR(engine->Step(batch).status());
  TF_RETURN_IF_ERROR(engine->Finish().status());
  const int steps = std::max(1, options.steps);
  auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) TF_RETURN_IF_ERROR(engine->Step(batch).status());
  TF_ASSIGN_OR_RETURN(*last, engine->Finish());
  *step_seconds = Since(t0) / steps;
  return Status::Ok();
}

std::pair<std::string, double> Slowest(const std::map<std::string, double>& stages) {
  std::pair<std::string, double> s{"", 0.0};
  for (const auto& [stage, seconds] : stages) {
    if (seconds > s.second) s = {stage, seconds};
  }
  return s;
}

}  // namespace

StatusOr<EngineBenchResult> RunEngineBench(Device& device, const EngineBenchOptions& options) {
  if (options.units < 1 || options.params < static_cast<uint64_t>(options.units)) {
    return InvalidArgumentError("bench engine: --params must be at least --units");
  }
  if (options.rounds < 1) return InvalidArgumentError("bench engine: --rounds must be at least 1");
  const EngineOptions& eo = options.engine;
  TF_RETURN_IF_ERROR(
      ValidateGradTransferDType("--grad-transfer-dtype", eo.weights_dtype,
                                GradTransferDType(eo.weights_dtype, eo.grad_transfer_dtype)));
  TF_ASSIGN_OR_RETURN(auto model,
                      SyntheticModel::Create(device, options.units, options.params / options.units,
                                             options.tokens, eo.weights_dtype));
  const std::vector<UnitInfo> units = model->Units();
  const SubGroupLayout layout = MakeSubGroups(units, eo.sub_group_params);
  EngineBenchResult result;
  result.params = layout.total_params;
  std::vector<double> ratios;
  for (int r = 0; r < options.rounds; ++r) {
    EngineBenchRound round;
    TF_RETURN_IF_ERROR(MeasureDeviceStages(device, *model, layout, eo, &round.stage_seconds));
    TF_RETURN_IF_ERROR(MeasureHostStages(units, layout, eo, &round.stage_seconds));
    if (eo.offload == OffloadPlacement::kNvme) {
      TF_RETURN_IF_ERROR(MeasureNvmeStage(device, layout, eo, &round.stage_seconds));
    }
    std::tie(round.slowest_stage, round.slowest_stage_seconds) = Slowest(round.stage_seconds);
    TF_RETURN_IF_ERROR(
        MeasurePipelined(device, *model, options, &round.step_seconds, &result.engine_stats));
    ratios.push_back(round.step_seconds / round.slowest_stage_seconds);
    for (const auto& [stage, seconds] : round.stage_seconds) {
      auto [it, inserted] = result.stage_seconds.emplace(stage, seconds);
      if (!inserted) it->second = std::min(it->second, seconds);
    }
    result.step_seconds =
        r == 0 ? round.step_seconds : std::min(result.step_seconds, round.step_seconds);
    result.rounds.push_back(std::move(round));
  }
  std::tie(result.slowest_stage, result.slowest_stage_seconds) = Slowest(result.stage_seconds);
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  result.median_round_ratio = n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
  double sum = 0;
  for (const auto& [stage, seconds] : result.stage_seconds) sum += seconds;
  const double denom = sum - result.slowest_stage_seconds;
  result.overlap_efficiency =
      denom > 0 ? std::clamp((sum - result.step_seconds) / denom, 0.0, 1.0) : 0.0;
  const double params = static_cast<double>(result.params);
  result.d2h_bytes_per_param = static_cast<double>(result.engine_stats.d2h_bytes) / params;
  result.h2d_bytes_per_param = static_cast<double>(result.engine_stats.h2d_bytes) / params;
  return result;
}

}  // namespace tierflow

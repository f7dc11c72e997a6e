// Stage-alone measurements and the pipelined step of `tierflow bench engine`.
#include "bench/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

#include "bench/engine_bench_params.h"
#include "bench/engine_prediction.h"
#include "bench/synthetic_model.h"
#include "common/half.h"
#include "common/host_memory.h"
#include "engine/nvme_state_tier.h"
#include "engine/offload_engine.h"
#include "model/transformer.h"
#include "optim/adam.h"
#include "optim/grad_stats.h"
#include "tierflow/grad_transfer.h"
#include "tierflow/model_config.h"

namespace tierflow {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Hands the model plain buffers: the compute stage alone, nothing streamed.
// Each unit's gradient buffer is zeroed on the compute stream before its
// backward and, with a 16-bit transfer dtype, cast for D2H after it, as the
// engine does. Unit 0 has a buffer of its own: with tied embeddings its
// bucket stays open across the whole backward.
class LocalAccess : public UnitAccess {
 public:
  LocalAccess(Stream& stream, const SubGroupLayout& layout, char* weights, DType weights_dtype,
              float* grads0, float* grads, DType transfer, void* wire, uint64_t capacity)
      : stream_(stream),
        layout_(layout),
        weights_(weights),
        weights_dtype_(weights_dtype),
        grads0_(grads0),
        grads_(grads),
        transfer_(transfer),
        wire_(wire),
        capacity_(capacity == 0 ? layout.max_unit_params
                                : std::min<uint64_t>(capacity, layout.max_unit_params)) {}
  StatusOr<void*> Weights(int unit) override {
    return static_cast<void*>(weights_ + layout_.unit_offsets[unit] * DTypeSize(weights_dtype_));
  }
  Status ReleaseWeights(int unit) override { return Status::Ok(); }
  // Pieces as large as the engine's buckets (the model cuts units the same
  // way), each in the unit's own buffer at its offset.
  uint64_t GradPieceCapacity() const override { return capacity_; }
  StatusOr<float*> BeginGrads(int unit, uint64_t begin, uint64_t count) override {
    if (count == 0 || count > capacity_ || begin > Params(unit) || count > Params(unit) - begin) {
      return InvalidArgumentError(
          "bench engine: unit " + std::to_string(unit) + " asked for a gradient piece [" +
          std::to_string(begin) + ", +" + std::to_string(count) + ") of its " +
          std::to_string(Params(unit)) + " (buckets of " + std::to_string(capacity_) + ")");
    }
    float* g = (unit == 0 ? grads0_ : grads_) + begin;
    open_[unit] = {begin, count};
    TF_RETURN_IF_ERROR(stream_.Memset(g, 0, count * 4));
    return g;
  }
  Status EndGrads(int unit) override {
    if (transfer_ == DType::kF32) return Status::Ok();
    const auto [begin, count] = open_[unit];
    return stream_.Cast(DType::kF32, (unit == 0 ? grads0_ : grads_) + begin, transfer_, wire_,
                        static_cast<int64_t>(count));
  }

 private:
  uint64_t Params(int unit) const {
    return layout_.unit_offsets[unit + 1] - layout_.unit_offsets[unit];
  }
  Stream& stream_;
  const SubGroupLayout& layout_;
  char* weights_;
  DType weights_dtype_;
  float* grads0_;
  float* grads_;
  DType transfer_;
  void* wire_;
  uint64_t capacity_;
  std::map<int, std::pair<uint64_t, uint64_t>> open_;  // unit -> its open piece
};

// Compute (forward + backward), D2H and H2D alone, on plain device buffers.
// H2D uploads the sub-groups of the units whose weights stay on the device
// (`streamed`: per unit, whether parameter offload streams it); none left:
// no h2d stage.
Status MeasureDeviceStages(Device& device, Trainable& model, const MicroBatch& batch,
                           const SubGroupLayout& layout, const EngineOptions& eo,
                           const std::vector<char>& streamed, std::map<std::string, double>* out) {
  const uint64_t total = layout.total_params, max_unit = layout.max_unit_params;
  const size_t num_units = layout.unit_offsets.size() - 1;
  const size_t wbytes = DTypeSize(eo.weights_dtype);
  const DType transfer = GradTransferDType(eo.weights_dtype, eo.grad_transfer_dtype);
  const size_t tbytes = DTypeSize(transfer);
  TF_ASSIGN_OR_RETURN(auto stream, device.CreateStream("bench"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer weights, device.Allocate(total * wbytes, "bench weights"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer grads0,
                      device.Allocate(layout.unit_offsets[1] * 4, "bench grads (unit 0)"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer grads, device.Allocate(max_unit * 4, "bench grads"));
  DeviceBuffer wire;
  if (transfer != DType::kF32) {
    TF_ASSIGN_OR_RETURN(wire, device.Allocate(max_unit * tbytes, "bench gradient cast"));
  }
  const void* d2h_source = transfer != DType::kF32 ? wire.data() : grads.data();
  TF_ASSIGN_OR_RETURN(PinnedBuffer host_grads, device.AllocatePinned(max_unit * tbytes, "bench"));
  TF_ASSIGN_OR_RETURN(PinnedBuffer host_weights,
                      device.AllocatePinned(layout.max_group_params * wbytes, "bench"));
  // Zero weights time the same kernels and keep a transformer finite (a zero
  // residual normalizes to zero, logits are uniform); the model's own init
  // would cost seconds of host time per round at 0.5 B.
  TF_RETURN_IF_ERROR(stream->Memset(weights.data(), 0, total * wbytes));
  LocalAccess access(*stream, layout, static_cast<char*>(weights.data()), eo.weights_dtype,
                     grads0.as<float>(), grads.as<float>(), transfer, wire.data(),
                     eo.grad_bucket_params);
  TF_RETURN_IF_ERROR(model.ForwardBackward(*stream, batch, 1.0f, access));  // warm-up
  TF_RETURN_IF_ERROR(stream->Synchronize());
  auto t0 = Clock::now();
  TF_RETURN_IF_ERROR(model.ForwardBackward(*stream, batch, 1.0f, access));
  TF_RETURN_IF_ERROR(stream->Synchronize());
  (*out)["compute"] = Since(t0);
  auto d2h = [&]() -> Status {
    for (size_t u = 0; u < num_units; ++u) {
      const uint64_t n = layout.unit_offsets[u + 1] - layout.unit_offsets[u];
      TF_RETURN_IF_ERROR(stream->CopyDeviceToHost(host_grads.data(), d2h_source, n * tbytes));
    }
    return stream->Synchronize();
  };
  bool any_resident = false;
  auto h2d = [&]() -> Status {
    for (const SubGroup& g : layout.groups) {
      if (streamed[static_cast<size_t>(g.unit)]) continue;
      any_resident = true;
      TF_RETURN_IF_ERROR(
          stream->CopyHostToDevice(static_cast<char*>(weights.data()) + g.global_offset * wbytes,
                                   host_weights.data(), g.num_params * wbytes));
    }
    return stream->Synchronize();
  };
  // Each transfer once untimed, as the compute above: the pipelined step runs
  // on memory its earlier steps touched, and a first touch of device memory
  // (page faults) is no part of a transfer's cost.
  TF_RETURN_IF_ERROR(d2h());
  t0 = Clock::now();
  TF_RETURN_IF_ERROR(d2h());
  (*out)["d2h"] = Since(t0);
  TF_RETURN_IF_ERROR(h2d());
  t0 = Clock::now();
  TF_RETURN_IF_ERROR(h2d());
  if (any_resident) (*out)["h2d"] = Since(t0);
  return Status::Ok();
}

// The host side alone, as the engine does it for a step of one micro-batch
// (the bench's): the norm pass over each unit's landed gradients (transfer
// dtype), then AdamW over every sub-group reading them.
Status MeasureHostStages(const SubGroupLayout& layout, const EngineOptions& eo,
                         std::map<std::string, double>* out) {
  const uint64_t total = layout.total_params;
  const size_t wbytes = DTypeSize(eo.weights_dtype);
  const DType transfer = GradTransferDType(eo.weights_dtype, eo.grad_transfer_dtype);
  const size_t tbytes = DTypeSize(transfer);
  // The engine's own allocations (huge pages), so the stages alone see the
  // memory the pipelined step sees.
  TF_ASSIGN_OR_RETURN(HostPages grads, HostPages::Allocate(total * tbytes, "bench engine grads"));
  TF_ASSIGN_OR_RETURN(HostPages state,
                      HostPages::Allocate(3 * total * 4, "bench engine optimizer state"));
  TF_ASSIGN_OR_RETURN(HostPages weights_out, HostPages::Allocate(layout.max_group_params * wbytes,
                                                                 "bench engine weight staging"));
  // First touch outside the timing, as the engine's tier is written at load.
  std::memset(state.data(), 0, state.num_bytes());
  {
    std::vector<float> g(layout.max_unit_params, 1e-3f);
    for (size_t u = 0; u + 1 < layout.unit_offsets.size(); ++u) {
      const uint64_t n = layout.unit_offsets[u + 1] - layout.unit_offsets[u];
      ConvertBuffer(DType::kF32, g.data(), transfer,
                    grads.as<char>() + layout.unit_offsets[u] * tbytes, n);
    }
  }
  auto t0 = Clock::now();
  for (const SubGroup& g : layout.groups) {
    OptimSpans spans;
    spans.params = state.as<float>() + g.global_offset;
    spans.exp_avg = state.as<float>() + total + g.global_offset;
    spans.exp_avg_sq = state.as<float>() + 2 * total + g.global_offset;
    spans.grads = grads.as<char>() + g.global_offset * tbytes;
    spans.grad_dtype = transfer;
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
  no.swap = SwapSetOf(eo);  // the engine's own I/O settings, not the defaults
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
Status MeasurePipelined(Device& device, Trainable& model, const MicroBatch& micro_batch,
                        const EngineBenchOptions& options, double* step_seconds, StepStats* last) {
  // One micro-batch a step, as the prediction assumes: the engine keeps only
  // the buffers that needs, as `train` does.
  EngineOptions engine_options = options.engine;
  engine_options.micro_batches_per_step = 1;
  TF_ASSIGN_OR_RETURN(auto engine, OffloadEngine::Create(device, model, engine_options));
  const std::vector<MicroBatch> batch{micro_batch};
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

// The model a bench runs and the micro-batch it runs on.
struct BenchModel {
  std::unique_ptr<Trainable> model;
  std::string name;
  int64_t tokens = 0;                 // per micro-batch (= per step: one micro-batch)
  std::optional<ModelConfig> config;  // transformers only
  std::vector<int> blocks;            // units of the repeated kind: what the bench streams
  std::vector<int32_t> inputs, targets;
  MicroBatch batch;
};

StatusOr<BenchModel> MakeBenchModel(Device& device, const EngineBenchOptions& o) {
  BenchModel m;
  const DType dtype = o.engine.weights_dtype;
  if (o.model.empty()) {
    if (o.units < 1 || o.params < static_cast<uint64_t>(o.units)) {
      return InvalidArgumentError("bench engine: --params must be at least --units");
    }
    TF_ASSIGN_OR_RETURN(
        m.model, SyntheticModel::Create(device, o.units, o.params / o.units, o.tokens, dtype));
    m.name = "synthetic (" + std::to_string(o.units) + " units)";
    m.tokens = o.tokens;
    for (int u = 0; u < o.units; ++u) m.blocks.push_back(u);
    return m;
  }
  if (o.micro_batch < 1 || o.seq_len < 1) {
    return InvalidArgumentError("bench engine: --micro-batch and --seq-len must be at least 1");
  }
  TF_ASSIGN_OR_RETURN(ModelConfig config, ResolveModel(o.model));
  TrainShape shape;
  shape.batch = o.micro_batch;
  shape.seq_len = o.seq_len;
  shape.checkpoint_activations = o.checkpointing;
  shape.offload_checkpoints = o.offload_checkpoints;
  shape.dtype = dtype;
  // The bench times the step's shape; a scaling type the kernel does not
  // apply changes no cost.
  shape.allow_unscaled_rope = true;
  TF_ASSIGN_OR_RETURN(auto transformer, TransformerModel::Create(device, config, shape));
  m.name = config.name;
  m.tokens = int64_t{o.micro_batch} * o.seq_len;
  m.inputs.resize(static_cast<size_t>(m.tokens));
  m.targets.resize(m.inputs.size());
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    m.inputs[i] = token(rng);
    m.targets[i] = token(rng);
  }
  m.batch.inputs = m.inputs.data();
  m.batch.targets = m.targets.data();
  m.batch.batch = o.micro_batch;
  m.batch.seq_len = o.seq_len;
  for (int l = 0; l < transformer->layout().num_layers(); ++l) {
    m.blocks.push_back(transformer->layout().layer_unit(l));
  }
  m.config = std::move(config);
  m.model = std::move(transformer);
  return m;
}

}  // namespace

StatusOr<EngineBenchResult> RunEngineBench(Device& device, const EngineBenchOptions& options) {
  if (options.rounds < 1) return InvalidArgumentError("bench engine: --rounds must be at least 1");
  TF_RETURN_IF_ERROR(ValidateGradTransferDType(
      "--grad-transfer-dtype", options.engine.weights_dtype,
      GradTransferDType(options.engine.weights_dtype, options.engine.grad_transfer_dtype)));
  // Before the model is built (a 0.5 B transformer takes seconds).
  TF_RETURN_IF_ERROR(CheckBenchStreaming(options.engine.params, options.engine.nvme_paths));
  TF_ASSIGN_OR_RETURN(BenchModel bench, MakeBenchModel(device, options));
  Trainable& model = *bench.model;
  const std::vector<UnitInfo> units = model.Units();
  // The options as run: the streamed units filled in.
  EngineBenchOptions run = options;
  TF_RETURN_IF_ERROR(ResolveBenchStreaming(static_cast<int>(units.size()), bench.blocks,
                                           run.engine.nvme_paths, &run.engine.params));
  const EngineOptions& eo = run.engine;
  const bool streams = eo.params.where != ParamOffload::kNone;
  std::vector<char> streamed(units.size(), 0);
  for (int u : eo.params.streamed_units) streamed[static_cast<size_t>(u)] = 1;
  TF_ASSIGN_OR_RETURN(const SubGroupLayout layout,
                      MakeSubGroups(units, SubGroupRule{eo.sub_group_cut, eo.sub_group_params}));
  EngineBenchResult result;
  result.model = bench.name;
  result.params = layout.total_params;
  result.tokens_per_step = bench.tokens;
  result.param_streaming = eo.params;
  uint64_t resident_params = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    (streamed[u] ? result.streamed_params : resident_params) += units[u].num_params;
  }
  std::vector<double> ratios;
  for (int r = 0; r < run.rounds; ++r) {
    EngineBenchRound round;
    TF_RETURN_IF_ERROR(MeasureDeviceStages(device, model, bench.batch, layout, eo, streamed,
                                           &round.stage_seconds));
    TF_RETURN_IF_ERROR(MeasureHostStages(layout, eo, &round.stage_seconds));
    if (eo.offload == OffloadPlacement::kNvme) {
      TF_RETURN_IF_ERROR(MeasureNvmeStage(device, layout, eo, &round.stage_seconds));
    }
    if (streams) {
      TF_ASSIGN_OR_RETURN(ParamStageResult p,
                          MeasureParamStage(device, units, model.WeightsSchedule(), eo));
      round.stage_seconds["h2d_params"] = p.seconds;
      result.param_stage_h2d_bytes = p.h2d_bytes;
      result.param_stage_nvme_read_bytes = p.nvme_read_bytes;
    }
    std::tie(round.slowest_stage, round.slowest_stage_seconds) = Slowest(round.stage_seconds);
    TF_RETURN_IF_ERROR(MeasurePipelined(device, model, bench.batch, run, &round.step_seconds,
                                        &result.engine_stats));
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
  const StepStats& st = result.engine_stats;
  result.d2h_bytes_per_param = static_cast<double>(st.d2h_bytes) / params;
  result.h2d_bytes_per_param = static_cast<double>(st.h2d_bytes) / params;
  result.param_h2d_bytes = st.param_h2d_bytes;
  result.param_nvme_read_bytes = st.param_nvme_read_bytes;
  if (bench.config) {
    TF_ASSIGN_OR_RETURN(
        result.prediction,
        PredictEngineStep(device, *bench.config, run, result.params, resident_params,
                          result.stage_seconds, result.param_stage_h2d_bytes));
    result.has_prediction = true;
  }
  return result;
}

}  // namespace tierflow

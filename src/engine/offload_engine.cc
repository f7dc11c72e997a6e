// The OffloadEngine: setup, the main-thread side of a step, and UnitAccess.
#include "engine/offload_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/agree.h"
#include "comm/communicator.h"
#include "common/half.h"
#include "common/units.h"
#include "engine/host_state_tier.h"
#include "engine/nvme_state_tier.h"
#include "tierflow/grad_transfer.h"

namespace tierflow {

OffloadEngine::OffloadEngine(Device& device, Trainable& model, const EngineOptions& options)
    : device_(device),
      model_(model),
      options_(options),
      trace_(options.trace != nullptr ? options.trace : &own_trace_),
      transfer_dtype_(GradTransferDType(options.weights_dtype, options.grad_transfer_dtype)),
      scaler_(options.loss_scaler, options.weights_dtype == DType::kF16) {}

StatusOr<std::unique_ptr<OffloadEngine>> OffloadEngine::Create(Device& device, Trainable& model,
                                                               const EngineOptions& options) {
  std::unique_ptr<OffloadEngine> engine(new OffloadEngine(device, model, options));
  TF_RETURN_IF_ERROR(engine->Init());
  return engine;
}

Status OffloadEngine::Init() {
  Status prepared = Prepare();
  if (options_.comm != nullptr && options_.comm->world_size() > 1) {
    // Every rank must reach the all-gathers below, or none: a rank that
    // failed (out of memory, a bad option) would leave the others waiting.
    prepared = comm::AgreeOnStatus(*options_.comm, prepared);
  }
  TF_RETURN_IF_ERROR(prepared);
  TF_RETURN_IF_ERROR(UploadAllWeights());

  weights_waited_.assign(units_.size(), -1);
  unit_ready_step_.assign(units_.size(), 0);
  // The worker's parts go with its thread: nothing else holds them while it
  // runs. At its end they come back for the destructor to free once the
  // device is idle (an upload may still read the committer's buffer).
  worker_ = std::thread([this, parts = std::move(worker_parts_)]() mutable {
    WorkerLoop(*parts);
    worker_parts_ = std::move(parts);
  });
  return Status::Ok();
}

Status OffloadEngine::Prepare() {
  TF_RETURN_IF_ERROR(ValidateOptions());
  worker_parts_ = std::make_unique<WorkerParts>();  // filled below, the worker's from Init
  units_ = model_.Units();
  if (units_.empty()) return InvalidArgumentError("the model has no parameter units");
  grad_offsets_.assign(1, 0);
  for (const UnitInfo& unit : units_) {
    grad_offsets_.push_back(grad_offsets_.back() + unit.num_params);
    max_unit_params_ = std::max(max_unit_params_, unit.num_params);
  }
  // How the ranks share the step; one process is a world of one.
  DataParallelStrategy::Options dpo;
  dpo.comm = options_.comm;
  dpo.device_comm = options_.device_comm;
  dpo.micro_batches_per_step = options_.micro_batches_per_step;
  TF_ASSIGN_OR_RETURN(DataParallelStrategy dp, DataParallelStrategy::Create(units_, dpo));
  dp_ = std::make_unique<DataParallelStrategy>(std::move(dp));
  // This rank's parts of every unit (the whole units in a world of one).
  // MakeSubGroups refuses slices of nothing and units without parameters.
  TF_ASSIGN_OR_RETURN(layout_, dp_->Layout(units_, SubGroupRule{options_.sub_group_cut,
                                                                options_.sub_group_params}));
  backward_pos_.resize(layout_.groups.size());
  for (size_t u = units_.size(); u-- > 0;) {
    for (int g : layout_.by_unit[u]) {
      backward_pos_[g] = backward_order_.size();
      backward_order_.push_back(g);
    }
  }
  TF_RETURN_IF_ERROR(CreateStreams());
  TF_RETURN_IF_ERROR(CreateWorkingWeights());
  TF_RETURN_IF_ERROR(AllocateGradients());
  TF_RETURN_IF_ERROR(AllocateUploads());
  TF_RETURN_IF_ERROR(CreateStateTiers());

  // Speculation, the decision, rollback: the worker's (kOverlapped speculates).
  Committer::Config cc;
  cc.budget_params = options_.pipeline == Pipeline::kOverlapped ? options_.speculation_params : 0;
  cc.weights_dtype = options_.weights_dtype;
  cc.pause_after_clip =
      options_.pipeline == Pipeline::kOverlapped && options_.pause_speculation_after_clip;
  TF_ASSIGN_OR_RETURN(worker_parts_->committer,
                      Committer::Create(device_, layout_, group_tier_, cc, trace_));
  if (data_parallel()) worker_parts_->unit_micro_params.assign(units_.size(), 0);

  // Initial state: master weights from the model, moments zero, device weights.
  std::vector<float> master(max_unit_params_);
  for (size_t u = 0; u < units_.size(); ++u) {
    TF_RETURN_IF_ERROR(model_.InitialWeights(static_cast<int>(u), master.data()));
    for (int g : layout_.by_unit[u]) {
      const SubGroup& sg = layout_.groups[g];
      TF_RETURN_IF_ERROR(TierOf(g).Write(g, master.data() + sg.unit_offset, nullptr, nullptr));
    }
  }
  return Status::Ok();
}

Status OffloadEngine::ValidateOptions() const {
  TF_RETURN_IF_ERROR(ValidateAdamOptions(options_.adam));
  if (options_.buffer_count < 2) return InvalidArgumentError("buffer_count must be >= 2");
  if (options_.grad_buckets < 2) return InvalidArgumentError("grad_buckets must be >= 2");
  if (options_.micro_batches_per_step < 0) {
    return InvalidArgumentError("micro_batches_per_step must be >= 0 (0: any number)");
  }
  TF_RETURN_IF_ERROR(
      ValidateGradTransferDType("grad_transfer_dtype", options_.weights_dtype, transfer_dtype_));
  if (options_.offload != OffloadPlacement::kHost && options_.offload != OffloadPlacement::kNvme) {
    return InvalidArgumentError("offload must be host or nvme, not " +
                                std::string(OffloadPlacementName(options_.offload)) +
                                " (the planner resolves auto)");
  }
  if (options_.grad_offload == GradOffload::kAuto) {
    return InvalidArgumentError(
        "gradient offload auto is the planner's to resolve: give host or nvme");
  }
  if (options_.grad_offload == GradOffload::kNvme) {
    std::string why;
    if (options_.offload != OffloadPlacement::kNvme || options_.nvme_ratio < 1.0) {
      why = "the whole optimizer state on NVMe (offload nvme, ratio 1): the gradients go beside it";
    } else if (options_.device_comm != nullptr) {
      why =
          "host collectives (device collectives sum each rank's part on the device; give "
          "--collectives host)";
    } else if (options_.micro_batches_per_step < 1) {
      why = "a fixed number of micro-batches per step (micro_batches_per_step >= 1)";
    } else if (options_.grad_spill_slots < 2) {
      why = "at least 2 gradient slots (grad_spill_slots)";
    }
    if (!why.empty()) return InvalidArgumentError("gradients on NVMe need " + why);
  }
  const ParamStreaming& params = options_.params;
  if (params.where == ParamOffload::kAuto) {
    return InvalidArgumentError(
        "parameter offload auto is the planner's to resolve: give none, "
        "host or nvme with the units to stream");
  }
  if (params.where == ParamOffload::kNone && !params.streamed_units.empty()) {
    return InvalidArgumentError("parameter offload none, yet " +
                                std::to_string(params.streamed_units.size()) +
                                " streamed units are listed: give host or nvme");
  }
  return Status::Ok();
}

Status OffloadEngine::CreateStreams() {
  TF_ASSIGN_OR_RETURN(compute_, device_.CreateStream("compute"));
  // The compute stream's library state (cuBLAS handle and workspace on
  // CUDA) exists before any step: the planner counts it as the workspace.
  TF_RETURN_IF_ERROR(compute_->PrepareForKernels());
  TF_ASSIGN_OR_RETURN(d2h_, device_.CreateStream("d2h"));
  TF_ASSIGN_OR_RETURN(h2d_, device_.CreateStream("h2d"));
  if (options_.device_comm != nullptr) {
    TF_ASSIGN_OR_RETURN(worker_parts_->part_d2h, device_.CreateStream("summed d2h"));
  }
  device_spans_ = std::make_unique<DeviceSpans>(device_, trace_);
  TF_RETURN_IF_ERROR(device_spans_->Anchor(*compute_));
  return Status::Ok();
}

Status OffloadEngine::CreateWorkingWeights() {
  // Parameter offload: the streamed units' weights live in their copy and a
  // ring of device slots; the rest are packed in weights_.
  const ParamStreaming& params = options_.params;
  if (params.where != ParamOffload::kNone) {
    StreamedWeights::Config wc;
    wc.params = params;
    wc.dtype = options_.weights_dtype;
    wc.nvme = SwapSetOf(options_);
    wc.spans = device_spans_.get();
    TF_ASSIGN_OR_RETURN(streamed_,
                        StreamedWeights::Create(device_, units_, model_.WeightsSchedule(), wc));
  }
  resident_offset_.assign(units_.size(), -1);
  uint64_t resident = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (streamed_ && streamed_->streamed(static_cast<int>(u))) continue;
    resident_offset_[u] = static_cast<int64_t>(resident);
    resident += units_[u].num_params;
  }
  if (resident > 0) {
    TF_ASSIGN_OR_RETURN(weights_, device_.Allocate(resident * wbytes(), "working weights"));
  }
  taken_.assign(units_.size(), 0);
  return Status::Ok();
}

Status OffloadEngine::AllocateGradients() {
  const int local_micro = dp_->local_micro();
  const uint64_t total = layout_.total_params;  // this rank's state
  // The gradient buckets and how they land on the host.
  GradInbox::Config ic;
  ic.bucket_params = options_.grad_bucket_params == 0
                         ? max_unit_params_
                         : std::min(options_.grad_bucket_params, max_unit_params_);
  ic.buckets = options_.grad_buckets;
  ic.transfer_dtype = transfer_dtype_;
  ic.landing = device_collectives()                          ? GradLanding::kNone
               : options_.grad_offload == GradOffload::kNvme ? GradLanding::kStaged
               : local_micro == 1                            ? GradLanding::kLanded
               : data_parallel()                             ? GradLanding::kGathered
               : local_micro > 1                             ? GradLanding::kAccumulated
                                                             : GradLanding::kEither;
  TF_ASSIGN_OR_RETURN(inbox_, GradInbox::Create(device_, model_params(), ic));
  ledger_ = std::make_unique<PieceLedger>(units_, ic.bucket_params, ic.buckets);
  if (device_collectives()) {
    // Nothing lands whole: each rank's part is summed on the device.
    const uint64_t n = local_micro > 1 ? std::max<uint64_t>(total, 1) : ic.bucket_params;
    TF_ASSIGN_OR_RETURN(
        worker_parts_->device_reduced,
        device_.Allocate(n * 4, "summed gradient on the device (this rank's parts)"));
    TF_ASSIGN_OR_RETURN(worker_parts_->reduced_landing,
                        device_.AllocatePinned(std::max<uint64_t>(total, 1) * 4,
                                               "summed gradient (this rank's parts)"));
  }
  if (data_parallel() && options_.grad_offload == GradOffload::kNvme) {
    // Units gathered for their reduce-scatter, and one unit's part of the sum.
    worker_parts_->unit_gathers.resize(3);
    for (WorkerParts::UnitGather& g : worker_parts_->unit_gathers) {
      TF_ASSIGN_OR_RETURN(g.buffer,
                          HostPages::AllocateResident(max_unit_params_ * tbytes(),
                                                      "unit gradient for the ranks' sum"));
    }
    TF_ASSIGN_OR_RETURN(
        worker_parts_->part_sum,
        HostPages::AllocateResident(std::max<uint64_t>(layout_.max_unit_params, 1) * 4,
                                    "summed gradient of one unit's part"));
  } else if (data_parallel() && !device_collectives()) {
    // This rank's parts of the summed gradient.
    TF_ASSIGN_OR_RETURN(worker_parts_->reduced,
                        HostPages::AllocateResident(std::max<uint64_t>(total, 1) * 4,
                                                    "summed gradient (this rank's parts)"));
  }
  return Status::Ok();
}

Status OffloadEngine::AllocateUploads() {
  // Whole units' weights for the all-gathers, which replace the per-sub-group
  // weight staging with data parallelism.
  gather_.resize(data_parallel() ? 2 : 0);
  for (GatherSlot& g : gather_) {
    TF_ASSIGN_OR_RETURN(g.buffer,
                        device_.AllocatePinned(max_unit_params_ * wbytes(), "weight all-gather"));
    TF_ASSIGN_OR_RETURN(g.uploaded, device_.CreateEvent(false));
  }
  staging_.resize(data_parallel() ? 0 : static_cast<size_t>(options_.buffer_count));
  for (StagingSlot& s : staging_) {
    TF_ASSIGN_OR_RETURN(
        s.buffer, device_.AllocatePinned(layout_.max_group_params * wbytes(), "weight staging"));
    TF_ASSIGN_OR_RETURN(s.uploaded, device_.CreateEvent(false));
  }
  unit_ready_.resize(units_.size());
  for (auto& e : unit_ready_) {
    TF_ASSIGN_OR_RETURN(e, device_.CreateEvent(false));
  }
  return Status::Ok();
}

Status OffloadEngine::CreateStateTiers() {
  // Which sub-groups live on NVMe: the last nvme_ratio of the parameters.
  const uint64_t total = layout_.total_params;
  group_tier_.assign(layout_.groups.size(), nullptr);
  std::vector<int> nvme_groups;
  if (options_.offload == OffloadPlacement::kNvme) {
    const double ratio = std::clamp(options_.nvme_ratio, 0.0, 1.0);
    const uint64_t host_params = static_cast<uint64_t>(std::llround((1.0 - ratio) * total));
    for (size_t g = 0; g < layout_.groups.size(); ++g) {
      if (layout_.groups[g].global_offset >= host_params)
        nvme_groups.push_back(static_cast<int>(g));
    }
  }
  if (nvme_groups.size() < layout_.groups.size()) {
    TF_ASSIGN_OR_RETURN(host_tier_, HostStateTier::Create(layout_, options_.lock_host_state));
  }
  if (!nvme_groups.empty()) {
    NvmeTierOptions nopt;
    nopt.swap = SwapSetOf(options_);
    nopt.slots = options_.buffer_count;
    nopt.two_copies = options_.pipeline == Pipeline::kOverlapped;
    nopt.trace = trace_;
    if (options_.grad_offload == GradOffload::kNvme) {
      nopt.grad_dtype = GradSpillDType();
      nopt.grad_slots = options_.grad_spill_slots;
    }
    TF_ASSIGN_OR_RETURN(nvme_tier_, NvmeStateTier::Create(layout_, nvme_groups, nopt, device_));
  }
  for (size_t g = 0; g < layout_.groups.size(); ++g) group_tier_[g] = host_tier_.get();
  for (int g : nvme_groups) group_tier_[g] = nvme_tier_.get();
  return CreateGradSpill();
}

Status OffloadEngine::CreateGradSpill() {
  if (options_.grad_offload != GradOffload::kNvme) return Status::Ok();
  auto& tier = static_cast<NvmeStateTier&>(*nvme_tier_);
  const GradSpill::Config config{.dtype = GradSpillDType(), .slots = options_.grad_spill_slots};
  TF_ASSIGN_OR_RETURN(
      grad_spill_, GradSpill::Create(device_, layout_, tier.store(), tier.grad_tensors(), config));
  return Status::Ok();
}

OffloadEngine::~OffloadEngine() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Arrival{0, 0, 0, 0, 0, 0, true});
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  (void)device_.Synchronize();
  worker_parts_.reset();  // back from the worker (joined): nothing reads its buffers now
  streamed_.reset();      // waits for its writes, removes its swap set
  if (nvme_tier_) (void)nvme_tier_->Flush();
}

Status OffloadEngine::UploadAllWeights() {
  if (data_parallel()) {
    // Each rank converts its parts and the all-gather completes each unit.
    for (size_t u = 0; u < units_.size(); ++u) {
      TF_ASSIGN_OR_RETURN(char* target, UnitWeightsTarget(static_cast<int>(u)));
      for (int g : layout_.by_unit[u]) {
        const SubGroup& sg = layout_.groups[g];
        std::vector<float> master(sg.num_params);
        TF_RETURN_IF_ERROR(TierOf(g).Read(g, master.data(), nullptr, nullptr));
        ConvertBuffer(DType::kF32, master.data(), options_.weights_dtype,
                      target + sg.unit_offset * wbytes(), sg.num_params);
      }
      TF_RETURN_IF_ERROR(GatherAndUploadUnit(static_cast<int>(u), /*step_id=*/-1, target));
    }
    if (streamed_) TF_RETURN_IF_ERROR(streamed_->Flush());
    return h2d_->Synchronize();
  }
  for (size_t g = 0; g < layout_.groups.size(); ++g) {
    const SubGroup& sg = layout_.groups[g];
    std::vector<float> master(sg.num_params);
    TF_RETURN_IF_ERROR(
        TierOf(static_cast<int>(g)).Read(static_cast<int>(g), master.data(), nullptr, nullptr));
    StagingSlot& slot = staging_[0];
    TF_RETURN_IF_ERROR(slot.uploaded->HostWait());
    ConvertBuffer(DType::kF32, master.data(), options_.weights_dtype, slot.buffer.data(),
                  sg.num_params);
    if (streamed_ && streamed_->streamed(sg.unit)) {
      TF_RETURN_IF_ERROR(
          streamed_->WriteRange(sg.unit, sg.unit_offset, slot.buffer.data(), sg.num_params));
      if (layout_.by_unit[sg.unit].back() == static_cast<int>(g)) {
        TF_RETURN_IF_ERROR(streamed_->FinishUnit(sg.unit));
      }
      continue;
    }
    TF_RETURN_IF_ERROR(
        h2d_->CopyHostToDevice(DeviceWeights(sg), slot.buffer.data(), sg.num_params * wbytes()));
    TF_RETURN_IF_ERROR(h2d_->Record(*slot.uploaded));
  }
  for (auto& e : unit_ready_) TF_RETURN_IF_ERROR(h2d_->Record(*e));
  if (streamed_) TF_RETURN_IF_ERROR(streamed_->Flush());
  return h2d_->Synchronize();
}

Status OffloadEngine::ReadDeviceWeights(float* out) {
  TF_RETURN_IF_ERROR(device_.Synchronize());
  std::vector<char> raw(weights_.num_bytes());
  if (!raw.empty()) {
    TF_RETURN_IF_ERROR(d2h_->CopyDeviceToHost(raw.data(), weights_.data(), raw.size()));
    TF_RETURN_IF_ERROR(d2h_->Synchronize());
  }
  std::vector<char> unit_copy;
  for (size_t u = 0; u < units_.size(); ++u) {
    const uint64_t n = units_[u].num_params;
    float* dst = out + grad_offsets_[u];
    if (resident_offset_[u] >= 0) {
      ConvertBuffer(options_.weights_dtype, raw.data() + resident_offset_[u] * wbytes(),
                    DType::kF32, dst, n);
      continue;
    }
    unit_copy.resize(n * wbytes());
    TF_RETURN_IF_ERROR(streamed_->ReadUnit(static_cast<int>(u), unit_copy.data()));
    ConvertBuffer(options_.weights_dtype, unit_copy.data(), DType::kF32, dst, n);
  }
  return Status::Ok();
}

Status OffloadEngine::DrainOnError(Status status) {
  // A failed ForwardBackward may have enqueued work that still reads the
  // caller's micro-batch (its token copies) and writes the engine's
  // buckets: it must finish before the caller frees the batch. The stream's
  // own error, if any, says less than the one being returned.
  if (!status.ok()) (void)compute_->Synchronize();
  return status;
}

StatusOr<StepStats> OffloadEngine::Step(const std::vector<MicroBatch>& micro_batches) {
  if (micro_batches.empty()) return InvalidArgumentError("Step: no micro-batches");
  if (options_.micro_batches_per_step > 0 &&
      micro_batches.size() != static_cast<size_t>(options_.micro_batches_per_step)) {
    return InvalidArgumentError(
        "Step: " + std::to_string(micro_batches.size()) +
        " micro-batches, but this engine was built for " +
        std::to_string(options_.micro_batches_per_step) +
        " per step (EngineOptions::micro_batches_per_step); build it with 0 to vary them");
  }
  // With data parallelism the list is the global step's: this rank runs
  // micro-batches rank, rank + world, ... (k_total of them).
  const int k_global = static_cast<int>(micro_batches.size());
  TF_ASSIGN_OR_RETURN(const int k_total, dp_->LocalMicroBatches(k_global));
  const int64_t step_id = ++issued_step_;
  float loss_scale;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_error_.ok()) return worker_error_;
    // Contexts of steps the worker has finished are no longer needed.
    while (steps_.size() > 1 && steps_.front().id < finished_step_) steps_.pop_front();
    StepContext ctx;
    ctx.id = step_id;
    ctx.micro_batches = k_total;
    ctx.landed = k_total == 1 && !device_collectives();
    ctx.loss_scale = scaler_.scale();
    ctx.lr = options_.adam.lr;
    ctx.unit_sum_squares.assign(units_.size(), 0.0);
    ctx.unit_non_finite.assign(units_.size(), 0);
    ctx.unit_params_landed.assign(units_.size(), 0);
    if (data_parallel()) ctx.chunk_sums.assign(dp_->Chunks(dp_->rank()), 0.0);
    ctx.start = TraceRecorder::Clock::now();
    loss_scale = ctx.loss_scale;
    steps_.push_back(std::move(ctx));
  }
  // The compute stream is idle between steps (each micro-batch below ends
  // with its Synchronize): the step's spans are timed from here.
  TF_RETURN_IF_ERROR(device_spans_->Anchor(*compute_));
  landing_ = k_total == 1 && !device_collectives();  // nothing lands whole then
  std::fill(taken_.begin(), taken_.end(), 0);
  if (streamed_) {
    TF_RETURN_IF_ERROR(streamed_->BeginPass(
        k_total, [this](int unit, bool wait) { return UnitCopyReady(unit, wait); }));
  }
  // Each micro-batch's weight in the step's mean: its share of the counted
  // targets when every micro-batch counts them, else 1/K.
  // (Over the global step's micro-batches: every rank weighs them alike.)
  std::vector<double> weight(static_cast<size_t>(k_global), 1.0 / k_global);
  {
    int64_t counted = 0;
    bool all_counted = true;
    for (const MicroBatch& mb : micro_batches) {
      all_counted = all_counted && mb.loss_tokens >= 0;
      counted += std::max<int64_t>(mb.loss_tokens, 0);
    }
    if (all_counted && counted > 0) {
      for (int k = 0; k < k_global; ++k) {
        weight[k] =
            static_cast<double>(micro_batches[k].loss_tokens) / static_cast<double>(counted);
      }
    }
  }
  double loss_sum = 0;
  std::vector<double> local_losses;
  for (int j = 0; j < k_total; ++j) {
    const int k = dp_->GlobalMicroBatch(j);
    current_micro_ = j;
    ledger_->BeginMicroBatch();
    TF_ASSIGN_OR_RETURN(DeviceSpans::Started span, device_spans_->Begin(*compute_));
    TF_RETURN_IF_ERROR(DrainOnError(model_.ForwardBackward(
        *compute_, micro_batches[k], static_cast<float>(loss_scale * weight[k]), *this)));
    TF_RETURN_IF_ERROR(DrainOnError(ledger_->CheckComplete()));
    TF_RETURN_IF_ERROR(DrainOnError(CheckWeightsReleased()));
    TF_RETURN_IF_ERROR(DrainOnError(device_spans_->End(*compute_, std::move(span), "compute",
                                                       "fwd+bwd micro " + std::to_string(k))));
    TF_RETURN_IF_ERROR(compute_->Synchronize());
    TF_RETURN_IF_ERROR(device_spans_->Collect());
    TF_ASSIGN_OR_RETURN(float loss, model_.LastLoss());
    loss_sum += weight[k] * loss;
    local_losses.push_back(loss);
  }
  TF_RETURN_IF_ERROR(EndWeightsPass(step_id));
  if (data_parallel()) {
    // The worker gathers every rank's losses with the norm (Decide).
    std::lock_guard<std::mutex> lock(mu_);
    StepContext* ctx = FindStep(step_id);
    if (ctx == nullptr) return InternalError("no record of step " + std::to_string(step_id));
    ctx->micro_weights = weight;
    ctx->local_losses = std::move(local_losses);
    ctx->stop_requested = stop_requested_.load();
    ctx->losses_posted = true;
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    StepContext* ctx = FindStep(step_id);
    return !worker_error_.ok() || (ctx != nullptr && ctx->decided);
  });
  if (!worker_error_.ok()) return worker_error_;
  StepContext* ctx = FindStep(step_id);
  if (!data_parallel()) {
    ctx->stats.loss = static_cast<float>(loss_sum);
    ctx->stats.stop_requested = stop_requested_.load();
  }
  return ctx->stats;
}

StatusOr<StepStats> OffloadEngine::Finish() {
  const int64_t last = issued_step_;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !worker_error_.ok() || finished_step_ >= last; });
    if (!worker_error_.ok()) return worker_error_;
  }
  TF_RETURN_IF_ERROR(device_.Synchronize());
  TF_RETURN_IF_ERROR(device_spans_->Collect());  // every span has completed: all are traced
  if (nvme_tier_) TF_RETURN_IF_ERROR(nvme_tier_->Flush());
  std::lock_guard<std::mutex> lock(mu_);
  if (last == 0) return StepStats{};
  StepContext* ctx = FindStep(last);
  if (ctx == nullptr) return InternalError("Finish: no record of step " + std::to_string(last));
  StepStats stats = ctx->stats;
  // Stage busy times and overlap over [step start, now].
  stats.wall_seconds =
      std::chrono::duration<double>(TraceRecorder::Clock::now() - ctx->start).count();
  stats.stage_seconds = trace_->BusySeconds();
  double sum = 0, longest = 0;
  for (const auto& [stage, seconds] : stats.stage_seconds) {
    sum += seconds;
    longest = std::max(longest, seconds);
  }
  stats.overlap_efficiency =
      sum > longest ? std::clamp((sum - stats.wall_seconds) / (sum - longest), 0.0, 1.0) : 0.0;
  stats.device_peak_bytes = device_.DeviceMemory().peak_bytes;
  stats.pinned_peak_bytes = device_.PinnedMemory().peak_bytes;
  stats.host_state_bytes = host_tier_ ? host_tier_->Stats().host_bytes : 0;
  if (nvme_tier_) {
    TierStats ns = nvme_tier_->Stats();
    stats.nvme_read_bytes = ns.bytes_read;
    stats.nvme_written_bytes = ns.bytes_written;
  }
  if (grad_spill_) {
    stats.nvme_read_bytes += grad_spill_->bytes_read();
    stats.nvme_written_bytes += grad_spill_->bytes_written();
  }
  stats.nvme_read_bytes += stats.param_nvme_read_bytes;
  // Keep only the last step's context; busy times restart for the next Finish.
  while (steps_.size() > 1) steps_.pop_front();
  trace_->ResetBusy();
  return stats;
}

void OffloadEngine::SetLearningRate(float lr) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.adam.lr = lr;
}

int64_t OffloadEngine::optimizer_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return optimizer_step_;
}

LossScaler::State OffloadEngine::loss_scaler_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scaler_.state();
}

void OffloadEngine::RestoreCounters(int64_t optimizer_step, const LossScaler::State& scaler) {
  std::lock_guard<std::mutex> lock(mu_);
  optimizer_step_ = optimizer_step;
  scaler_.Restore(scaler);
}

Status OffloadEngine::ReadState(int g, float* master, float* exp_avg, float* exp_avg_sq) {
  if (g < 0 || static_cast<size_t>(g) >= layout_.groups.size()) {
    return InvalidArgumentError("no sub-group " + std::to_string(g));
  }
  return TierOf(g).Read(g, master, exp_avg, exp_avg_sq);
}

Status OffloadEngine::WriteState(int g, const float* master, const float* exp_avg,
                                 const float* exp_avg_sq) {
  if (g < 0 || static_cast<size_t>(g) >= layout_.groups.size()) {
    return InvalidArgumentError("no sub-group " + std::to_string(g));
  }
  return TierOf(g).Write(g, master, exp_avg, exp_avg_sq);
}

namespace {
// Weights from the engine, gradients into one scratch buffer that nobody reads.
class EvalAccess : public UnitAccess {
 public:
  EvalAccess(OffloadEngine* engine, float* scratch) : engine_(engine), scratch_(scratch) {}
  StatusOr<void*> Weights(int unit) override { return engine_->Weights(unit); }
  Status ReleaseWeights(int unit) override { return engine_->ReleaseWeights(unit); }
  uint64_t GradPieceCapacity() const override { return engine_->GradPieceCapacity(); }
  StatusOr<float*> BeginGrads(int unit, uint64_t begin, uint64_t count) override {
    return scratch_;
  }
  Status EndGrads(int unit) override { return Status::Ok(); }

 private:
  OffloadEngine* engine_;
  float* scratch_;
};
}  // namespace

StatusOr<float> OffloadEngine::EvaluateLoss(const MicroBatch& batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_error_.ok()) return worker_error_;
    if (finished_step_ < issued_step_) {
      return FailedPreconditionError("EvaluateLoss while a step is in flight: call Finish first");
    }
  }
  // Every bucket is free when idle; borrow the first as scratch.
  EvalAccess access(this, inbox_->bucket(0).grads.as<float>());
  std::fill(taken_.begin(), taken_.end(), 0);
  if (streamed_) {
    TF_RETURN_IF_ERROR(
        streamed_->BeginPass(1, [this](int unit, bool wait) { return UnitCopyReady(unit, wait); }));
  }
  TF_RETURN_IF_ERROR(DrainOnError(model_.ForwardBackward(*compute_, batch, 1.0f, access)));
  TF_RETURN_IF_ERROR(DrainOnError(CheckWeightsReleased()));
  TF_RETURN_IF_ERROR(compute_->Synchronize());
  if (streamed_) {
    TF_RETURN_IF_ERROR(streamed_->EndPass());
    streamed_->TakeTransferred();  // an evaluation's uploads belong to no step
  }
  return model_.LastLoss();
}

uint64_t OffloadEngine::HostStateBytes() const {
  uint64_t bytes = 0;
  if (host_tier_) bytes += host_tier_->Stats().host_bytes;
  if (nvme_tier_) bytes += nvme_tier_->Stats().host_bytes;
  return bytes;
}

uint64_t OffloadEngine::NvmeFileBytes() const {
  return nvme_tier_ ? static_cast<NvmeStateTier*>(nvme_tier_.get())->store().stats().file_bytes : 0;
}

// ---- UnitAccess ----

StatusOr<void*> OffloadEngine::Weights(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) {
    return InvalidArgumentError("Weights: no unit " + std::to_string(unit));
  }
  if (taken_[unit]) {
    return FailedPreconditionError("Weights(" + units_[unit].name +
                                   ") taken again before its ReleaseWeights");
  }
  if (streamed_ && streamed_->streamed(unit)) {
    TF_ASSIGN_OR_RETURN(void* p, streamed_->Take(unit, *compute_));
    taken_[unit] = 1;
    return p;
  }
  const int64_t step_id = issued_step_;
  if (weights_waited_[unit] != step_id) {
    // The previous step's update of this unit must be enqueued before the
    // compute stream can wait on it (an event wait binds to the latest record).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !worker_error_.ok() || unit_ready_step_[unit] >= step_id - 1; });
    if (!worker_error_.ok()) return worker_error_;
    lock.unlock();
    TF_RETURN_IF_ERROR(compute_->Wait(*unit_ready_[unit]));
    weights_waited_[unit] = step_id;
  }
  taken_[unit] = 1;
  // Streamed units further on may have become ready meanwhile.
  if (streamed_) TF_RETURN_IF_ERROR(streamed_->Pump());
  return static_cast<void*>(static_cast<char*>(weights_.data()) +
                            resident_offset_[unit] * wbytes());
}

Status OffloadEngine::ReleaseWeights(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) {
    return InvalidArgumentError("ReleaseWeights: no unit " + std::to_string(unit));
  }
  if (!taken_[unit]) {
    return FailedPreconditionError("ReleaseWeights(" + units_[unit].name +
                                   ") without Weights before it");
  }
  taken_[unit] = 0;
  if (!streamed_) return Status::Ok();
  if (streamed_->streamed(unit)) return streamed_->Release(unit, *compute_);
  return streamed_->Pump();
}

Status OffloadEngine::CheckWeightsReleased() const {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (taken_[u]) {
      return InternalError("the model left the weights of '" + units_[u].name +
                           "' taken (Weights without ReleaseWeights)");
    }
  }
  return Status::Ok();
}

StatusOr<bool> OffloadEngine::UnitCopyReady(int unit, bool wait) {
  const int64_t step_id = issued_step_;
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return unit_ready_step_[unit] >= step_id - 1; };
  if (wait) cv_.wait(lock, [&] { return !worker_error_.ok() || ready(); });
  if (!worker_error_.ok()) return worker_error_;
  return ready();
}

Status OffloadEngine::EndWeightsPass(int64_t step_id) {
  if (!streamed_) return Status::Ok();
  TF_RETURN_IF_ERROR(streamed_->EndPass());
  const StreamedWeights::Transferred t = streamed_->TakeTransferred();
  std::lock_guard<std::mutex> lock(mu_);
  StepContext* ctx = FindStep(step_id);
  if (ctx == nullptr) return InternalError("no record of step " + std::to_string(step_id));
  ctx->stats.param_h2d_bytes += t.h2d_bytes;
  ctx->stats.h2d_bytes += t.h2d_bytes;
  ctx->stats.param_nvme_read_bytes += t.nvme_read_bytes;
  return Status::Ok();
}

StatusOr<float*> OffloadEngine::BeginGrads(int unit, uint64_t begin, uint64_t count) {
  TF_RETURN_IF_ERROR(ledger_->CheckBegin(unit, begin, count));
  int chosen = -1;
  {
    // A bucket is free once the host has consumed its previous contents,
    // which implies its D2H (and so every device use of it) is complete.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !worker_error_.ok() || (chosen = inbox_->TakeFree()) >= 0; });
    if (!worker_error_.ok()) return worker_error_;
  }
  ledger_->Open(unit, chosen, begin, count);
  GradInbox::Bucket& b = inbox_->bucket(chosen);
  TF_RETURN_IF_ERROR(compute_->Memset(b.grads.data(), 0, count * 4));
  return b.grads.as<float>();
}

Status OffloadEngine::EndGrads(int unit) {
  TF_ASSIGN_OR_RETURN(const PieceLedger::Piece piece, ledger_->Close(unit));
  const int b = piece.bucket;
  GradInbox::Bucket& bucket = inbox_->bucket(b);
  const uint64_t n = piece.count;
  // 16-bit transfer: the fp32 bucket is cast on the compute stream, after
  // everything that writes it, into the bucket's transfer buffer; the D2H
  // copies that. A non-finite gradient stays non-finite (and a finite fp32
  // one beyond fp16's range becomes Inf), so the host's overflow check sees it.
  if (transfer_dtype_ != DType::kF32) {
    TF_RETURN_IF_ERROR(compute_->Cast(DType::kF32, bucket.grads.data(), transfer_dtype_,
                                      bucket.wire.data(), static_cast<int64_t>(n)));
  }
  const void* wire = bucket.sent();
  // One micro-batch: these gradients are the step's, so their statistics
  // (of exactly the values that cross) come from the device.
  // (With data parallelism the norm is of the sum over ranks, taken after the reduce-scatter.)
  if (landing_ && !data_parallel()) {
    TF_RETURN_IF_ERROR(compute_->SumSquares(transfer_dtype_, wire, static_cast<int64_t>(n),
                                            inbox_->DeviceStats(b), inbox_->StatsScratch()));
  }
  TF_RETURN_IF_ERROR(compute_->Record(*bucket.filled));
  Arrival arrival{issued_step_, unit, piece.begin, n, current_micro_, b, false};
  auto arrive = [this, arrival] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(arrival);
    }
    cv_.notify_all();
    return Status::Ok();
  };
  TF_RETURN_IF_ERROR(d2h_->Wait(*bucket.filled));
  // Device collectives: the worker sums the piece over the ranks where it
  // is, once the compute stream has written it; only this rank's part of
  // the sum crosses PCIe (ReducePieceOnDevice). The callback rides the d2h
  // stream (behind the event), not the compute stream: a compute stream
  // that failed skips its callbacks, which would leave the bucket taken.
  if (device_collectives()) return d2h_->HostCallback(arrive);
  TF_ASSIGN_OR_RETURN(DeviceSpans::Started span, device_spans_->Begin(*d2h_));
  void* dst = landing_ && !grad_spill_
                  ? static_cast<void*>(inbox_->Landed(grad_offsets_[unit] + piece.begin))
                  : bucket.staging.data();
  TF_RETURN_IF_ERROR(d2h_->CopyDeviceToHost(dst, wire, n * tbytes()));
  if (landing_ && !data_parallel()) {
    TF_RETURN_IF_ERROR(d2h_->CopyDeviceToHost(inbox_->HostStatsTarget(b), inbox_->DeviceStats(b),
                                              sizeof(GradSquares)));
  }
  const bool whole = n == units_[unit].num_params;
  TF_RETURN_IF_ERROR(device_spans_->End(
      *d2h_, std::move(span), "d2h",
      "grads " + units_[unit].name +
          (whole ? "" : " [" + std::to_string(piece.begin) + ", +" + std::to_string(n) + ")")));
  // The one host callback per transfer: it wakes the optimizer worker, which
  // may be speculating and must take this arrival as soon as it lands.
  return d2h_->HostCallback(arrive);
}

OffloadEngine::StepContext* OffloadEngine::FindStep(int64_t id) {
  for (StepContext& c : steps_) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

}  // namespace tierflow

// The OffloadEngine's host side, run by its worker thread: gradient
// accumulation as gradients arrive, speculative updates during backward, the
// clip/overflow decision, commit or rollback, the remaining updates in
// forward order with NVMe read-ahead, and per-sub-group weight uploads.
#include <algorithm>
#include <cmath>

#include "common/half.h"
#include "engine/committer.h"
#include "engine/offload_engine.h"
#include "optim/grad_accumulate.h"
#include "optim/grad_stats.h"
#include "optim/parallel_copy.h"

namespace tierflow {

void OffloadEngine::WorkerLoop(WorkerParts& w) {
  // Arrivals come first (accumulation frees gradient buckets, so backward
  // never stalls on the optimizer, and the clip decision comes as early as
  // possible); speculative updates fill the time between arrivals.
  Committer& committer = *w.committer;
  for (;;) {
    Arrival a{};
    bool have_arrival = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || committer.HasPending(); });
      if (!queue_.empty()) {
        a = queue_.front();
        queue_.pop_front();
        have_arrival = true;
      }
    }
    if (have_arrival && a.stop) return;
    Status s;
    if (have_arrival) {
      s = ProcessArrival(w, a);
    } else {
      const int g = committer.PopPending();
      StepContext* ctx;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ctx = FindStep(committer.pending_step());
      }
      if (ctx != nullptr && !ctx->decided) s = Speculate(w, *ctx, g);
    }
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (worker_error_.ok()) {
          worker_error_ = s.WithContext(
              "optimizer step " +
              std::to_string(have_arrival ? a.step_id : committer.pending_step()) +
              " failed; the state in memory may be partly updated: resume from the last "
              "checkpoint");
        }
      }
      committer.ClearPending();
      cv_.notify_all();
      // Keep draining (freeing buckets) so nothing blocks on us; later steps fail fast.
    }
  }
}

Status OffloadEngine::ProcessArrival(WorkerParts& w, const Arrival& a) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_error_.ok()) {
      inbox_->Free(a.bucket);
      cv_.notify_all();
      return Status::Ok();
    }
  }
  StepContext* ctx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ctx = FindStep(a.step_id);
  }
  if (ctx == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_->Free(a.bucket);
    return InternalError("gradients for unknown step " + std::to_string(a.step_id));
  }
  const int u = a.unit;
  const uint64_t n = a.count;
  // The final micro-batch's accumulation of a whole unit also yields its
  // norm and non-finite flag, in the same pass over the accumulator. (A
  // unit in pieces takes them in one pass once complete, so its sum does
  // not depend on where the pieces were cut; with data parallelism they
  // come after the reduce-scatter, from the sum over ranks.)
  const bool last_micro = a.micro == ctx->micro_batches - 1;
  StatusOr<GradStatsResult> stats = GradStatsResult{};
  if (device_collectives()) {
    TF_RETURN_IF_ERROR(ReducePieceOnDevice(w, *ctx, a));  // frees the bucket
  } else {
    TF_RETURN_IF_ERROR(TakeLandedPiece(w, *ctx, a, &stats));
  }
  if (!last_micro) return Status::Ok();
  TF_RETURN_IF_ERROR(stats.status());

  if (!ctx->final_backward_started) {
    ctx->final_backward_started = true;
    TF_RETURN_IF_ERROR(BeginFinalBackward(w));
  }
  // A unit in pieces: their sums add up in the order they land (the d2h
  // stream's order, fixed by the model), so the norm is deterministic.
  ctx->unit_sum_squares[u] += stats->sum_squares;
  ctx->unit_non_finite[u] |= static_cast<char>(stats->has_non_finite);
  ctx->unit_params_landed[u] += n;
  if (ctx->unit_params_landed[u] < units_[u].num_params) return Status::Ok();
  return UnitComplete(w, *ctx, u, n == units_[u].num_params);
}

Status OffloadEngine::BeginFinalBackward(WorkerParts& w) {
  // Reset per-step bookkeeping and make sure NVMe read-ahead is under way
  // for what this step updates first (synchronous: the forward-order pass
  // after the decision; overlapped: the backward-order speculation, if the
  // end of the last step could not).
  w.group_done.assign(layout_.groups.size(), 0);
  w.unit_groups_left.resize(units_.size());
  for (size_t v = 0; v < units_.size(); ++v) {
    w.unit_groups_left[v] = static_cast<int>(layout_.by_unit[v].size());
  }
  w.committer->BeginStep();
  w.prefetched_upto = 0;
  if (options_.pipeline == Pipeline::kSynchronous) return PrefetchForward(w, 0);
  return PrefetchNextStep(/*wait_for_writes=*/false);
}

Status OffloadEngine::UnitComplete(WorkerParts& w, StepContext& ctx, int u, bool whole_unit) {
  ++ctx.units_complete;
  if (data_parallel()) {
    TF_RETURN_IF_ERROR(TakeNormChunks(w, ctx, u));
  } else if (grad_spill_ && !ctx.landed) {
    // Summed in the spill's slots: the same bits as over a whole accumulator.
    TF_ASSIGN_OR_RETURN(GradStatsResult whole, grad_spill_->UnitStats(u));
    ctx.unit_sum_squares[u] = whole.sum_squares;
    ctx.unit_non_finite[u] = static_cast<char>(whole.has_non_finite);
  } else if (!ctx.landed && !whole_unit) {
    TF_ASSIGN_OR_RETURN(GradStatsResult whole, GradStats(inbox_->Accumulator() + grad_offsets_[u],
                                                         DType::kF32, units_[u].num_params));
    ctx.unit_sum_squares[u] = whole.sum_squares;
    ctx.unit_non_finite[u] = static_cast<char>(whole.has_non_finite);
  }
  Committer& committer = *w.committer;
  if (ctx.unit_non_finite[u] != 0) {
    committer.ClearPending();  // the step will be skipped: speculating is wasted work
  } else if (options_.pipeline == Pipeline::kOverlapped && !committer.paused()) {
    committer.QueueUnit(ctx.id, u);  // within the budget
  }
  if (options_.speculate_eagerly) {
    while (committer.HasPending()) TF_RETURN_IF_ERROR(Speculate(w, ctx, committer.PopPending()));
  }
  if (ctx.units_complete < static_cast<int>(units_.size())) return Status::Ok();
  // Sub-groups not speculated yet are updated after the decision instead.
  committer.ClearPending();
  return Decide(w, ctx);
}

Status OffloadEngine::TakeLandedPiece(WorkerParts& w, StepContext& ctx, const Arrival& a,
                                      StatusOr<GradStatsResult>* stats) {
  const int u = a.unit;
  const uint64_t n = a.count;
  const bool last_micro = a.micro == ctx.micro_batches - 1;
  if (grad_spill_ && data_parallel()) {
    // Gathered per unit for its reduce-scatter (ReduceScatterToSpill).
    TF_ASSIGN_OR_RETURN(char* unit, UnitGatherFor(w, u));
    ParallelCopy(unit + a.begin * tbytes(), inbox_->bucket(a.bucket).staging.data(), n * tbytes());
  } else if (grad_spill_) {
    // Bounded slots, then the drives (engine/grad_spill.h); with several
    // micro-batches the spill takes the unit's statistics (UnitComplete).
    ScopedSpan span(trace_, "accumulate", "grads to NVMe " + units_[u].name);
    TF_RETURN_IF_ERROR(grad_spill_->Take(u, a.begin, inbox_->bucket(a.bucket).staging.data(),
                                         transfer_dtype_, n, a.micro, ctx.micro_batches));
    if (ctx.landed) {
      const GradSquares& landed = inbox_->HostStats(a.bucket);
      *stats = GradStatsResult{landed.sum_squares, landed.non_finite != 0};
    }
  } else if (ctx.landed) {
    if (!data_parallel()) {
      // Computed on the device and landed with the gradients (EndGrads).
      const GradSquares& landed = inbox_->HostStats(a.bucket);
      *stats = GradStatsResult{landed.sum_squares, landed.non_finite != 0};
    }
  } else {
    ScopedSpan span(trace_, "accumulate", "grads " + units_[u].name);
    const void* grads = inbox_->bucket(a.bucket).staging.data();
    float* acc = inbox_->Accumulator() + grad_offsets_[u] + a.begin;
    if (data_parallel()) {
      // Gathered for the unit's reduce-scatter; the ranks sum (below).
      ParallelCopy(inbox_->Gathered(grad_offsets_[u] + a.begin), grads, n * tbytes());
    } else if (last_micro && n == units_[u].num_params) {
      *stats = AccumulateGradsWithStats(acc, grads, transfer_dtype_, n, a.micro == 0);
    } else {
      AccumulateGrads(acc, grads, transfer_dtype_, n, a.micro == 0);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_->Free(a.bucket);
    ctx.stats.d2h_bytes += n * tbytes() + (ctx.landed ? sizeof(GradSquares) : 0);
  }
  cv_.notify_all();
  return data_parallel() ? CollectForReduceScatter(w, ctx, u, n, a.micro) : Status::Ok();
}

Status OffloadEngine::UpdateGroup(WorkerParts& w, StepContext& ctx, int g, int64_t adam_step,
                                  float grad_scale, void* out, const StateBackup& backup) {
  const SubGroup& sg = layout_.groups[g];
  TF_ASSIGN_OR_RETURN(StateView view, TierOf(g).Acquire(g));
  ScopedSpan span(trace_, "optimizer", "adam " + sg.name);
  // The gradient: this rank's parts, summed (data parallel); the landed
  // transfer (one micro-batch); or the fp32 accumulator.
  const void* grads = nullptr;
  DType grad_dtype = DType::kF32;
  if (grad_spill_) {
    TF_ASSIGN_OR_RETURN(grads, grad_spill_->Acquire(g));
    grad_dtype = grad_spill_->dtype();
  } else if (data_parallel()) {
    grads = w.Reduced() + sg.global_offset;
  } else if (ctx.landed) {
    grads = inbox_->Landed(sg.global_offset);
    grad_dtype = transfer_dtype_;
  } else {
    grads = inbox_->Accumulator() + sg.global_offset;
  }
  const OptimSpans spans{.params = view.master,
                         .exp_avg = view.exp_avg,
                         .exp_avg_sq = view.exp_avg_sq,
                         .grads = grads,
                         .grad_dtype = grad_dtype,
                         .out = out,
                         .out_dtype = options_.weights_dtype,
                         .n = sg.num_params,
                         .backup_params = backup.master,
                         .backup_exp_avg = backup.exp_avg,
                         .backup_exp_avg_sq = backup.exp_avg_sq};
  AdamOptions adam = options_.adam;
  adam.lr = ctx.lr;
  AdamStepArgs args;
  args.step = adam_step;
  args.grad_scale = grad_scale;
  StatusOr<StepResult> r = AdamStep(adam, args, spans);
  if (grad_spill_) grad_spill_->Release(g);
  // Non-finite gradients were ruled out by the decision (or speculation guard).
  return r.status();
}

Status OffloadEngine::Speculate(WorkerParts& w, StepContext& ctx, int g) {
  TF_ASSIGN_OR_RETURN(Committer::Target target, w.committer->BeginSpeculation(g));
  // Read ahead the groups that arrive next (backward order) while this one computes.
  const size_t pos = backward_pos_[g];
  for (size_t i = pos + 1;
       i < backward_order_.size() && i <= pos + static_cast<size_t>(options_.buffer_count - 2);
       ++i) {
    TF_RETURN_IF_ERROR(TierOf(backward_order_[i]).Prefetch(backward_order_[i]));
  }
  int64_t adam_step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adam_step = optimizer_step_ + 1;  // the step this one will be if it is not skipped
  }
  TF_RETURN_IF_ERROR(
      UpdateGroup(w, ctx, g, adam_step, 1.0f / ctx.loss_scale, target.out, target.backup));
  return w.committer->EndSpeculation(g);
}

Status OffloadEngine::Decide(WorkerParts& w, StepContext& ctx) {
  if (data_parallel()) TF_RETURN_IF_ERROR(GatherNormAndLoss(ctx));
  const ClipDecision d = DecideClip(ctx.unit_sum_squares, ctx.unit_non_finite, ctx.loss_scale,
                                    options_.clip_grad_norm);
  ctx.stats.grad_norm = d.grad_norm;
  ctx.stats.clip_coef = d.coef;
  ctx.stats.loss_scale = ctx.loss_scale;
  ctx.stats.skipped = d.non_finite;
  // Commit or roll back what ran during backward. Committed sub-groups'
  // weights wait in the committer's buffer and go up in forward order with
  // the rest below: backward speculates the model's last units, which the
  // next forward needs last, and uploading them first held the first units'
  // updates behind them (their staging slots wait on the H2D stream).
  std::vector<const void*> committed;
  TF_ASSIGN_OR_RETURN(Committer::Outcome outcome,
                      w.committer->Resolve(d, &committed, &w.group_done));
  ctx.stats.speculated_groups = outcome.speculated;
  ctx.stats.speculation_paused = outcome.paused;
  ctx.stats.rolled_back = outcome.rolled_back;

  int64_t adam_step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adam_step = optimizer_step_ + 1;
    if (!d.non_finite) optimizer_step_ = adam_step;
    scaler_.Update(d.non_finite);
    ctx.stats.step = optimizer_step_;
    ctx.decided = true;
  }
  cv_.notify_all();

  const float grad_scale = d.coef / ctx.loss_scale;
  if (d.non_finite) {
    // Nothing changes: drop what was read ahead; every unit's current
    // weights stay valid for the next step.
    if (nvme_tier_) TF_RETURN_IF_ERROR(nvme_tier_->Flush());
    if (grad_spill_) TF_RETURN_IF_ERROR(grad_spill_->EndStep());
    for (size_t u = 0; u < units_.size(); ++u) MarkUnitReady(static_cast<int>(u), ctx.id);
  } else if (data_parallel()) {
    TF_RETURN_IF_ERROR(UpdateAndGatherUnits(w, ctx, adam_step, grad_scale, committed));
  } else {
    TF_RETURN_IF_ERROR(UpdateInForwardOrder(w, ctx, adam_step, grad_scale, committed));
    // The next step's first speculation waits for this before reusing its buffer.
    if (outcome.committed) TF_RETURN_IF_ERROR(w.committer->RecordUploaded(*h2d_));
    // Every gradient written must have landed: a failed write fails this step.
    if (grad_spill_) TF_RETURN_IF_ERROR(grad_spill_->EndStep());
  }
  // The worker would idle until the next step's gradients: start reading
  // what that step needs first (waiting for this step's writes to free slots
  // costs no disk time; the disk is busy with them).
  TF_RETURN_IF_ERROR(PrefetchNextStep(/*wait_for_writes=*/true));
  TF_RETURN_IF_ERROR(h2d_->Synchronize());
  TF_RETURN_IF_ERROR(device_spans_->Collect());
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_step_ = ctx.id;
  }
  cv_.notify_all();
  return Status::Ok();
}

Status OffloadEngine::UpdateInForwardOrder(WorkerParts& w, StepContext& ctx, int64_t adam_step,
                                           float grad_scale,
                                           const std::vector<const void*>& committed) {
  // The rest in forward order, so the next forward's first units land first.
  for (size_t i = 0; i < layout_.groups.size(); ++i) {
    const int g = static_cast<int>(i);
    const SubGroup& sg = layout_.groups[g];
    if (committed[g] != nullptr) {
      TF_RETURN_IF_ERROR(UploadGroup(ctx, g, committed[g]));
    } else if (streamed_ && streamed_->streamed(sg.unit)) {
      // A streamed unit's new weights go straight into its copy (host or
      // write-back buffer): no staging slot, no upload, no second copy.
      TF_RETURN_IF_ERROR(PrefetchForward(w, i));
      TF_ASSIGN_OR_RETURN(void* out,
                          streamed_->RangeForWrite(sg.unit, sg.unit_offset, sg.num_params));
      TF_RETURN_IF_ERROR(UpdateGroup(w, ctx, g, adam_step, grad_scale, out, {}));
      TF_RETURN_IF_ERROR(TierOf(g).Release(g, true));
      w.group_done[g] = 1;
    } else {
      TF_RETURN_IF_ERROR(PrefetchForward(w, i));
      StagingSlot& slot = staging_[w.next_staging];
      w.next_staging = (w.next_staging + 1) % staging_.size();
      TF_RETURN_IF_ERROR(slot.uploaded->HostWait());
      TF_RETURN_IF_ERROR(UpdateGroup(w, ctx, g, adam_step, grad_scale, slot.buffer.data(), {}));
      TF_RETURN_IF_ERROR(TierOf(g).Release(g, true));
      TF_RETURN_IF_ERROR(UploadGroup(ctx, g, slot.buffer.data()));
      TF_RETURN_IF_ERROR(h2d_->Record(*slot.uploaded));
      w.group_done[g] = 1;
    }
    if (--w.unit_groups_left[sg.unit] == 0) TF_RETURN_IF_ERROR(UnitUpdated(sg.unit, ctx.id));
  }
  return Status::Ok();
}

Status OffloadEngine::PrefetchForward(WorkerParts& w, size_t from_index) {
  // Keep up to buffer_count - 1 sub-groups ahead of `from_index` in flight.
  const size_t limit =
      std::min(layout_.groups.size(), from_index + static_cast<size_t>(options_.buffer_count) - 1);
  size_t& upto = w.prefetched_upto;
  upto = std::max(upto, from_index);
  while (upto < limit) {
    if (!w.group_done.empty() && w.group_done[upto]) {
      ++upto;
      continue;
    }
    TF_RETURN_IF_ERROR(TierOf(static_cast<int>(upto)).Prefetch(static_cast<int>(upto)));
    if (grad_spill_) TF_RETURN_IF_ERROR(grad_spill_->Prefetch(static_cast<int>(upto)));
    ++upto;
  }
  return Status::Ok();
}

Status OffloadEngine::PrefetchNextStep(bool wait_for_writes) {
  // Acquire needs one slot free, so buffer_count - 1 may be read ahead.
  const size_t n = std::min(layout_.groups.size(), static_cast<size_t>(options_.buffer_count) - 1);
  for (size_t i = 0; i < n; ++i) {
    const int g =
        options_.pipeline == Pipeline::kOverlapped ? backward_order_[i] : static_cast<int>(i);
    StateTier& tier = TierOf(g);
    TF_RETURN_IF_ERROR(wait_for_writes ? tier.PrefetchWaitingForWrites(g) : tier.Prefetch(g));
  }
  return Status::Ok();
}

Status OffloadEngine::UploadGroup(StepContext& ctx, int g, const void* src) {
  const SubGroup& sg = layout_.groups[g];
  const size_t num_bytes = sg.num_params * wbytes();
  if (streamed_ && streamed_->streamed(sg.unit)) {
    // A streamed unit's new weights replace its copy; the next fetch uploads them.
    ScopedSpan span(trace_, "optimizer", "weights to copy " + sg.name);
    return streamed_->WriteRange(sg.unit, sg.unit_offset, src, sg.num_params);
  }
  TF_ASSIGN_OR_RETURN(DeviceSpans::Started span, device_spans_->Begin(*h2d_));
  TF_RETURN_IF_ERROR(h2d_->CopyHostToDevice(DeviceWeights(sg), src, num_bytes));
  TF_RETURN_IF_ERROR(device_spans_->End(*h2d_, std::move(span), "h2d", "weights " + sg.name));
  // Spans that have landed go to the trace now, so the event pool stays as
  // small as the uploads in flight.
  TF_RETURN_IF_ERROR(device_spans_->Collect());
  std::lock_guard<std::mutex> lock(mu_);
  ctx.stats.h2d_bytes += num_bytes;
  return Status::Ok();
}

Status OffloadEngine::UnitUpdated(int unit, int64_t step_id) {
  if (streamed_ && streamed_->streamed(unit)) TF_RETURN_IF_ERROR(streamed_->FinishUnit(unit));
  MarkUnitReady(unit, step_id);
  return Status::Ok();
}

void OffloadEngine::MarkUnitReady(int unit, int64_t step_id) {
  Status s = h2d_->Record(*unit_ready_[unit]);
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok() && worker_error_.ok()) worker_error_ = s;
  unit_ready_step_[unit] = step_id;
  cv_.notify_all();
}

}  // namespace tierflow

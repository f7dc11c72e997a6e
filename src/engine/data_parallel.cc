// The OffloadEngine's data-parallel side (EngineOptions::comm): each unit
// cut into one part per rank, the reduce-scatter of each unit's gradient as
// backward completes it, the global norm and loss from every rank's chunk
// sums, and the all-gather of each unit's updated weights.
//
// Every collective is issued by the worker thread, in an order every rank
// shares: a reduce-scatter per unit in the order backward completes units
// (the D2H stream's, fixed by the model), then at the decision one
// all-gather of the norm's chunk sums and the losses, then an all-gather per
// unit in forward order (none when the step is skipped, which every rank
// decides alike from the same sums).
//
// Bit-identity with one rank accumulating the same micro-batches: rank r
// runs global micro-batch k = j * world + r. Each unit's gradient of each
// micro-batch is reduce-scattered as soon as it is in (from the landing
// buffer, or gathered from the staging buckets): the ranks' contributions,
// widened to fp32, are added in rank order with the engine's own
// accumulation (optim/grad_accumulate.h) to the step's running sum, so the
// adds are those of one rank accumulating micro-batch 0, 1, 2, ... in that
// order, whatever the world size (which is what lets a checkpoint resume on
// another number of ranks bit for bit). A rank accumulates nothing itself:
// the wire carries each micro-batch in the transfer dtype (2 B/param per
// micro-batch, where a local fp32 sum would send 4 once). Parts are cut at
// the norm's chunks (kGradStatsChunkElems), so the ranks' chunk sums, put
// back in order, add up to one pass over the whole unit (GradChunkSquares),
// which is what one rank takes for each unit. AdamW is elementwise, so where
// the parts and sub-groups are cut changes no bit of the update.
//
// Streamed units (parameter offload): every rank keeps a whole copy of each
// and streams it through its own ring; the unit's all-gather fills that copy
// in place (UnitWeightsTarget), so a rank's copy is the one process's.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/communicator.h"
#include "common/half.h"
#include "engine/data_parallel_strategy.h"
#include "engine/offload_engine.h"
#include "optim/grad_stats.h"

namespace tierflow {

Status OffloadEngine::CollectForReduceScatter(WorkerParts& w, StepContext& ctx, int u, uint64_t n,
                                              int micro) {
  uint64_t& in = w.unit_micro_params[u];
  in += n;
  if (in < units_[u].num_params) return Status::Ok();
  in = 0;
  if (grad_spill_) return ReduceScatterToSpill(w, ctx, u, micro);
  const void* send =
      ctx.landed ? inbox_->Landed(grad_offsets_[u]) : inbox_->Gathered(grad_offsets_[u]);
  ScopedSpan span(trace_, "comm", "reduce-scatter " + units_[u].name);
  // Micro-batch j adds ranks' j * world + r in rank order after the ones
  // before: the global order of one rank accumulating them all.
  return dp_->comm()->ReduceScatterSum(send, transfer_dtype_, dp_->part(u),
                                       w.Reduced() + layout_.unit_offsets[u],
                                       /*accumulate=*/micro > 0);
}

StatusOr<char*> OffloadEngine::UnitGatherFor(WorkerParts& w, int u) {
  WorkerParts::UnitGather* free = nullptr;
  for (WorkerParts::UnitGather& g : w.unit_gathers) {
    if (g.unit == u) return g.buffer.as<char>();
    if (g.unit < 0 && free == nullptr) free = &g;
  }
  if (free == nullptr) {
    return ResourceExhaustedError(
        "gradients on NVMe: more than " + std::to_string(w.unit_gathers.size()) +
        " units' gradients in flight at once for the ranks' sum (the model interleaves its "
        "units' pieces)");
  }
  free->unit = u;
  return free->buffer.as<char>();
}

// Gradients on the drives: the unit's running sum comes back from the
// spill (after the first micro-batch), the ranks add this micro-batch to it
// in the collective's order, and the part goes back to the spill; the
// final micro-batch's part also gives the norm's chunks (TakeNormChunks).
Status OffloadEngine::ReduceScatterToSpill(WorkerParts& w, StepContext& ctx, int u, int micro) {
  float* part = w.part_sum.as<float>();
  const uint64_t part_begin = layout_.part_begins[u];
  if (micro > 0) {
    for (int g : layout_.by_unit[u]) {
      const SubGroup& sg = layout_.groups[g];
      TF_RETURN_IF_ERROR(grad_spill_->ReadInto(g, part + (sg.unit_offset - part_begin)));
    }
  }
  char* send = nullptr;
  for (WorkerParts::UnitGather& g : w.unit_gathers) {
    if (g.unit == u) {
      send = g.buffer.as<char>();
      g.unit = -1;  // free once the collective below has read it
    }
  }
  if (send == nullptr) return InternalError("no gathered gradient of " + units_[u].name);
  {
    ScopedSpan span(trace_, "comm", "reduce-scatter " + units_[u].name);
    TF_RETURN_IF_ERROR(dp_->comm()->ReduceScatterSum(send, transfer_dtype_, dp_->part(u), part,
                                                     /*accumulate=*/micro > 0));
  }
  const uint64_t n = dp_->part(u).size(dp_->rank());
  if (n == 0) return Status::Ok();
  ScopedSpan span(trace_, "accumulate", "grads to NVMe " + units_[u].name);
  return grad_spill_->Take(u, part_begin, part, DType::kF32, n, micro, ctx.micro_batches,
                           /*summed=*/true);
}

Status OffloadEngine::ReducePieceOnDevice(WorkerParts& w, StepContext& ctx, const Arrival& a) {
  const int u = a.unit;
  const comm::Partition& part = dp_->part(u);
  // The piece [p0, p1) of the unit, cut where the ranks' parts are.
  const uint64_t p0 = a.begin, p1 = a.begin + a.count;
  std::vector<size_t> bounds(static_cast<size_t>(dp_->world()) + 1);
  for (int r = 0; r <= dp_->world(); ++r) {
    bounds[static_cast<size_t>(r)] = std::clamp<uint64_t>(part.begin(r), p0, p1) - p0;
  }
  StatusOr<comm::Partition> piece = comm::Partition::FromBounds(std::move(bounds));
  const uint64_t mine = piece.ok() ? piece->size(dp_->rank()) : 0;
  // This rank's share of the piece starts `into` elements into its part.
  const uint64_t into = mine > 0 ? p0 + piece->begin(dp_->rank()) - part.begin(dp_->rank()) : 0;
  const bool accumulating = dp_->local_micro() > 1;
  float* recv = w.device_reduced.as<float>() + (accumulating ? layout_.unit_offsets[u] + into : 0);
  const void* send = inbox_->bucket(a.bucket).sent();
  Status s = piece.status();
  if (s.ok()) {
    ScopedSpan span(trace_, "comm", "device reduce-scatter " + units_[u].name);
    // As on the host: micro-batch j adds ranks' j * world + r in rank order
    // after the ones before (the running sum stays on the device).
    s = dp_->device_comm()->ReduceScatterSum(send, transfer_dtype_, *piece, recv,
                                             /*accumulate=*/accumulating && a.micro > 0);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_->Free(a.bucket);  // the collective has read it
  }
  cv_.notify_all();
  TF_RETURN_IF_ERROR(s);
  if (a.micro != ctx.micro_batches - 1 || mine == 0) return Status::Ok();
  // This rank's last micro-batch: its share of the sum goes to the host.
  TF_ASSIGN_OR_RETURN(DeviceSpans::Started started, device_spans_->Begin(*w.part_d2h));
  TF_RETURN_IF_ERROR(
      w.part_d2h->CopyDeviceToHost(w.Reduced() + layout_.unit_offsets[u] + into, recv, mine * 4));
  TF_RETURN_IF_ERROR(
      device_spans_->End(*w.part_d2h, std::move(started), "d2h", "summed grads " + units_[u].name));
  TF_RETURN_IF_ERROR(w.part_d2h->Synchronize());
  TF_RETURN_IF_ERROR(device_spans_->Collect());
  std::lock_guard<std::mutex> lock(mu_);
  ctx.stats.d2h_bytes += mine * 4;
  return Status::Ok();
}

Status OffloadEngine::TakeNormChunks(WorkerParts& w, StepContext& ctx, int u) {
  const int rank = dp_->rank();
  const uint64_t n = dp_->part(u).size(rank);
  // With gradients on the drives the part's sum is still in part_sum.
  const float* recv = grad_spill_ ? w.part_sum.as<float>() : w.Reduced() + layout_.unit_offsets[u];
  double* sums = ctx.chunk_sums.data() + dp_->ChunkBegin(rank, u);
  TF_RETURN_IF_ERROR(GradChunkSquares(recv, DType::kF32, n, sums));
  // Locally non-finite: no speculation on this unit (the step will be skipped).
  bool bad = false;
  for (uint64_t c = 0; c < dp_->ChunkBegin(rank, u + 1) - dp_->ChunkBegin(rank, u); ++c) {
    bad |= std::isnan(sums[c]);
  }
  ctx.unit_non_finite[u] = static_cast<char>(bad);
  return Status::Ok();
}

Status OffloadEngine::GatherNormAndLoss(StepContext& ctx) {
  {
    // Step posts this rank's losses once its micro-batches have run.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ctx.losses_posted || stopping_; });
    if (!ctx.losses_posted) return AbortedError("the engine is shutting down mid-step");
  }
  TF_ASSIGN_OR_RETURN(DataParallelStrategy::StepTotals totals,
                      dp_->Exchange(ctx.chunk_sums, ctx.local_losses, ctx.stop_requested,
                                    ctx.micro_weights, trace_));
  ctx.unit_sum_squares = std::move(totals.unit_sum_squares);
  ctx.unit_non_finite = std::move(totals.unit_non_finite);
  ctx.stats.loss = totals.loss;
  ctx.stats.stop_requested = totals.stop_requested;
  return Status::Ok();
}

Status OffloadEngine::UpdateAndGatherUnits(WorkerParts& w, StepContext& ctx, int64_t adam_step,
                                           float grad_scale,
                                           const std::vector<const void*>& committed) {
  for (size_t u = 0; u < units_.size(); ++u) {
    TF_ASSIGN_OR_RETURN(char* target, UnitWeightsTarget(static_cast<int>(u)));
    for (int g : layout_.by_unit[u]) {
      const SubGroup& sg = layout_.groups[g];
      void* out = target + sg.unit_offset * wbytes();
      if (committed[g] != nullptr) {
        std::memcpy(out, committed[g], sg.num_params * wbytes());
        continue;
      }
      TF_RETURN_IF_ERROR(PrefetchForward(w, static_cast<size_t>(g)));
      TF_RETURN_IF_ERROR(UpdateGroup(w, ctx, g, adam_step, grad_scale, out, {}));
      TF_RETURN_IF_ERROR(TierOf(g).Release(g, true));
      w.group_done[g] = 1;
    }
    TF_RETURN_IF_ERROR(GatherAndUploadUnit(static_cast<int>(u), ctx.id, target));
    if (resident_offset_[u] < 0) continue;  // streamed: the next fetch uploads it
    std::lock_guard<std::mutex> lock(mu_);
    // Device collectives: this rank's part goes up, the devices gather the rest.
    ctx.stats.h2d_bytes +=
        (device_collectives() ? dp_->part(u).size(dp_->rank()) : units_[u].num_params) * wbytes();
  }
  return Status::Ok();
}

Status OffloadEngine::UploadPartAndGather(int u, int64_t step_id) {
  const comm::Partition& part = dp_->part(u);
  GatherSlot& slot = gather_[next_gather_];
  next_gather_ = (next_gather_ + 1) % gather_.size();
  const size_t offset = part.begin(dp_->rank()) * wbytes();
  char* unit = static_cast<char*>(weights_.data()) + resident_offset_[u] * wbytes();
  TF_ASSIGN_OR_RETURN(DeviceSpans::Started span, device_spans_->Begin(*h2d_));
  TF_RETURN_IF_ERROR(h2d_->CopyHostToDevice(unit + offset, slot.buffer.as<char>() + offset,
                                            part.size(dp_->rank()) * wbytes()));
  TF_RETURN_IF_ERROR(
      device_spans_->End(*h2d_, std::move(span), "h2d", "weights part " + units_[u].name));
  TF_RETURN_IF_ERROR(h2d_->Record(*slot.uploaded));
  // The collective reads the part from the device: it must be there first.
  TF_RETURN_IF_ERROR(slot.uploaded->HostWait());
  TF_RETURN_IF_ERROR(device_spans_->Collect());
  {
    ScopedSpan gather(trace_, "comm", "device all-gather weights " + units_[u].name);
    TF_RETURN_IF_ERROR(dp_->device_comm()->AllGather(unit + offset, wbytes(), part, unit));
  }
  // The unit is whole on the device once the collective returns.
  if (step_id >= 0) {
    MarkUnitReady(u, step_id);
    return Status::Ok();
  }
  return h2d_->Record(*unit_ready_[u]);
}

StatusOr<char*> OffloadEngine::UnitWeightsTarget(int u) {
  if (resident_offset_[u] < 0) {
    // Every rank keeps the whole streamed copy (its ring uploads from it):
    // the all-gather fills it in place, with no slot and no second copy.
    TF_ASSIGN_OR_RETURN(void* copy, streamed_->RangeForWrite(u, 0, units_[u].num_params));
    return static_cast<char*>(copy);
  }
  GatherSlot& slot = gather_[next_gather_];
  TF_RETURN_IF_ERROR(slot.uploaded->HostWait());
  return slot.buffer.as<char>();
}

Status OffloadEngine::GatherAndUploadUnit(int u, int64_t step_id, char* target) {
  const comm::Partition& part = dp_->part(u);
  if (device_collectives() && resident_offset_[u] >= 0) return UploadPartAndGather(u, step_id);
  {
    ScopedSpan span(trace_, "comm", "all-gather weights " + units_[u].name);
    TF_RETURN_IF_ERROR(dp_->comm()->AllGather(target + part.begin(dp_->rank()) * wbytes(), wbytes(),
                                              part, target));
  }
  if (resident_offset_[u] < 0) {
    TF_RETURN_IF_ERROR(streamed_->FinishUnit(u));
    if (step_id >= 0) {
      MarkUnitReady(u, step_id);
      return Status::Ok();
    }
    return h2d_->Record(*unit_ready_[u]);
  }
  GatherSlot& slot = gather_[next_gather_];
  next_gather_ = (next_gather_ + 1) % gather_.size();
  const size_t num_bytes = units_[u].num_params * wbytes();
  void* dst = static_cast<char*>(weights_.data()) + resident_offset_[u] * wbytes();
  TF_ASSIGN_OR_RETURN(DeviceSpans::Started span, device_spans_->Begin(*h2d_));
  TF_RETURN_IF_ERROR(h2d_->CopyHostToDevice(dst, slot.buffer.data(), num_bytes));
  TF_RETURN_IF_ERROR(
      device_spans_->End(*h2d_, std::move(span), "h2d", "weights " + units_[u].name));
  TF_RETURN_IF_ERROR(device_spans_->Collect());
  TF_RETURN_IF_ERROR(h2d_->Record(*slot.uploaded));
  if (step_id >= 0) {
    MarkUnitReady(u, step_id);
    return Status::Ok();
  }
  return h2d_->Record(*unit_ready_[u]);
}

}  // namespace tierflow

// Gradients through pinned sub-group slots to the NVMe state store.
#include "engine/grad_spill.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "optim/grad_accumulate.h"

namespace tierflow {
namespace {
constexpr uint64_t kPage = 4096;
// What a failed gradient write or read tells the user to do.
constexpr const char* kWhatToDo =
    ": free space on the drive or replace it, then resume from the last checkpoint (--resume); "
    "the checkpoint is not touched by a failed step";
}  // namespace

StatusOr<std::unique_ptr<GradSpill>> GradSpill::Create(Device& device, const SubGroupLayout& layout,
                                                       offload::StateStore& store,
                                                       std::vector<offload::TensorId> tensors,
                                                       const Config& config) {
  if (config.slots < 2) {
    return InvalidArgumentError("gradient spill slots: " + std::to_string(config.slots) +
                                ", need at least 2");
  }
  if (tensors.size() != layout.groups.size()) {
    return InvalidArgumentError("gradient spill: one tensor per sub-group expected");
  }
  std::unique_ptr<GradSpill> spill(new GradSpill(layout, store, std::move(tensors), config));
  spill->slot_bytes_ =
      (layout.max_group_params * DTypeSize(config.dtype) + kPage - 1) / kPage * kPage;
  spill->slots_.resize(static_cast<size_t>(config.slots));
  std::vector<iovec> iovecs;
  for (Slot& s : spill->slots_) {
    TF_ASSIGN_OR_RETURN(s.buffer,
                        device.AllocatePinned(spill->slot_bytes_, "gradient slot (NVMe spill)"));
    iovecs.push_back({s.buffer.data(), spill->slot_bytes_});
  }
  // A memlock refusal is reported by the store (stats) and I/O goes on unregistered.
  (void)store.RegisterBuffers(iovecs);
  spill->complete_.assign(layout.groups.size(), 0);
  spill->unit_sums_.resize(layout.by_unit.size());
  spill->ResetUnitSums();
  return spill;
}

GradSpill::~GradSpill() {
  for (Slot& s : slots_) {
    if (s.writing || s.reading) (void)(s.writing ? s.write : s.read).Wait();
  }
}

uint64_t GradSpill::GroupBytes(int g) const {
  return layout_.groups[g].num_params * DTypeSize(config_.dtype);
}

int GradSpill::SlotOf(int g) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].group == g) return static_cast<int>(i);
  }
  return -1;
}

Status GradSpill::Settle(Slot& s, bool write) {
  bool& busy = write ? s.writing : s.reading;
  offload::IoTicket& ticket = write ? s.write : s.read;
  if (!busy) return Status::Ok();
  busy = false;
  Status st = ticket.Wait();
  ticket = offload::IoTicket();
  if (st.ok()) return st;
  const int g = s.group;
  s.group = -1;  // what it held is not (or not surely) the file's: nobody may take it for it
  return st.WithContext(std::string(write ? "writing" : "reading") + " the gradient of sub-group " +
                        layout_.groups[g].name + (write ? " to NVMe" : " back from NVMe") +
                        kWhatToDo);
}

StatusOr<int> GradSpill::FreeSlot(bool wait) {
  for (;;) {
    int best = -1;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.writing && s.write.done()) TF_RETURN_IF_ERROR(SettleWrite(s));
      if (Busy(s)) continue;
      if (s.group < 0) return static_cast<int>(i);
      if (best < 0 || s.last_use < slots_[static_cast<size_t>(best)].last_use) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) {
      slots_[static_cast<size_t>(best)].group = -1;
      return best;
    }
    if (!wait) return -1;
    // Wait for the write that started first to land.
    Slot* oldest = nullptr;
    for (Slot& s : slots_) {
      if (s.writing && s.holds == 0 && !s.filling &&
          (oldest == nullptr || s.last_use < oldest->last_use)) {
        oldest = &s;
      }
    }
    if (oldest == nullptr) {
      return ResourceExhaustedError(
          "all " + std::to_string(slots_.size()) +
          " gradient slots hold sub-groups still being summed or used: raise the gradient "
          "spill slots (EngineOptions::grad_spill_slots)");
    }
    TF_RETURN_IF_ERROR(SettleWrite(*oldest));
  }
}

Status GradSpill::StartRead(int g, int slot, int micro) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  StatusOr<offload::IoTicket> t = store_.ReadAsync(tensors_[g], s.buffer.data(), 0, GroupBytes(g));
  if (!t.ok()) {
    return t.status().WithContext("reading the gradient of sub-group " + layout_.groups[g].name +
                                  " back from NVMe" + kWhatToDo);
  }
  s.read = std::move(*t);
  s.reading = true;
  s.group = g;
  s.micro = micro;
  s.filled = layout_.groups[g].num_params;
  s.filling = false;
  s.last_use = ++clock_;
  bytes_read_ += GroupBytes(g);
  return Status::Ok();
}

StatusOr<int> GradSpill::SlotForTake(int g, int micro, bool add_to_previous) {
  int i = SlotOf(g);
  if (i >= 0) {
    Slot& s = slots_[static_cast<size_t>(i)];
    if (s.filling && s.micro == micro) return i;  // more of this micro-batch's pieces
    if (add_to_previous && s.micro == micro - 1 && !s.filling) {
      // The sum through the last micro-batch is here: add to it once its
      // write has landed (the buffer must not change under the write).
      TF_RETURN_IF_ERROR(SettleWrite(s));
      TF_RETURN_IF_ERROR(SettleRead(s));
      if (s.group == g) {
        s.filling = true;
        s.micro = micro;
        s.filled = 0;
        return i;
      }
    } else if (s.holds == 0) {
      // An older micro-batch's or step's data: not this one's starting point.
      TF_RETURN_IF_ERROR(SettleWrite(s));
      TF_RETURN_IF_ERROR(SettleRead(s));
      s.group = -1;
    }
  }
  TF_ASSIGN_OR_RETURN(i, FreeSlot(/*wait=*/true));
  Slot& s = slots_[static_cast<size_t>(i)];
  if (add_to_previous) {
    // The running sum went to the drive: read it back to add to it.
    TF_RETURN_IF_ERROR(StartRead(g, i, micro - 1));
    TF_RETURN_IF_ERROR(SettleRead(s));
  }
  s.group = g;
  s.micro = micro;
  s.filled = 0;
  s.filling = true;
  s.last_use = ++clock_;
  return i;
}

Status GradSpill::Take(int u, uint64_t begin, const void* src, DType src_dtype, uint64_t n,
                       int micro, int micro_batches, bool summed) {
  final_micro_ = micro_batches - 1;
  const bool accumulate = micro_batches > 1 && !summed;
  if (!accumulate && src_dtype != config_.dtype) {
    return InternalError("gradient spill: a copied gradient lands in " +
                         std::string(DTypeName(config_.dtype)) + ", got " +
                         std::string(DTypeName(src_dtype)));
  }
  const uint64_t end = begin + n;
  for (int g : layout_.by_unit[static_cast<size_t>(u)]) {
    const SubGroup& sg = layout_.groups[g];
    const uint64_t a = std::max(begin, sg.unit_offset);
    const uint64_t b = std::min(end, sg.unit_offset + sg.num_params);
    if (a >= b) continue;
    TF_ASSIGN_OR_RETURN(const int i, SlotForTake(g, micro, accumulate && micro > 0));
    Slot& s = slots_[static_cast<size_t>(i)];
    const char* from = static_cast<const char*>(src) + (a - begin) * DTypeSize(src_dtype);
    const uint64_t at = a - sg.unit_offset;
    if (accumulate) {
      AccumulateGrads(s.buffer.as<float>() + at, from, src_dtype, b - a, micro == 0);
    } else {
      std::memcpy(s.buffer.as<char>() + at * DTypeSize(src_dtype), from,
                  (b - a) * DTypeSize(src_dtype));
    }
    s.filled += b - a;
    s.last_use = ++clock_;
    if (s.filled == sg.num_params)
      TF_RETURN_IF_ERROR(Complete(g, s, accumulate ? micro_batches : 1));
  }
  return Status::Ok();
}

Status GradSpill::Complete(int g, Slot& s, int micro_batches) {
  const SubGroup& sg = layout_.groups[g];
  s.filling = false;
  if (s.micro == final_micro_) complete_[g] = 1;
  if (micro_batches > 1 && s.micro == micro_batches - 1) {
    TF_RETURN_IF_ERROR(unit_sums_[static_cast<size_t>(sg.unit)].Add(
        sg.unit_offset, s.buffer.as<float>(), sg.num_params));
  }
  StatusOr<offload::IoTicket> t = store_.WriteAsync(tensors_[g], s.buffer.data(), 0, GroupBytes(g));
  if (!t.ok()) {
    s.group = -1;
    return t.status().WithContext("writing the gradient of sub-group " + sg.name + " to NVMe" +
                                  kWhatToDo);
  }
  s.write = std::move(*t);
  s.writing = true;
  bytes_written_ += GroupBytes(g);
  return Status::Ok();
}

void GradSpill::ResetUnitSums() {
  for (size_t u = 0; u < unit_sums_.size(); ++u) {
    unit_sums_[u].Reset(layout_.unit_offsets[u + 1] - layout_.unit_offsets[u]);
  }
}

StatusOr<GradStatsResult> GradSpill::UnitStats(int u) const {
  const UnitChunkSums& sums = unit_sums_[static_cast<size_t>(u)];
  if (!sums.complete()) {
    return InternalError("gradient spill: unit " + std::to_string(u) +
                         "'s statistics asked before its final micro-batch is complete");
  }
  return sums.Result();
}

Status GradSpill::Prefetch(int g) {
  if (!complete_[g] || SlotOf(g) >= 0) return Status::Ok();
  // Keep a slot for an Acquire that was not read ahead: read only when two
  // are idle.
  int idle = 0;
  for (const Slot& s : slots_) idle += Busy(s) ? 0 : 1;
  if (idle < 2) return Status::Ok();
  TF_ASSIGN_OR_RETURN(const int i, FreeSlot(/*wait=*/false));
  if (i < 0) return Status::Ok();
  return StartRead(g, i, final_micro_);
}

Status GradSpill::ReadInto(int g, void* dst) {
  int i = SlotOf(g);
  if (i >= 0 && slots_[static_cast<size_t>(i)].filling) {
    return InternalError("gradient spill: sub-group " + layout_.groups[g].name +
                         " read while it is being summed");
  }
  if (i < 0) {
    TF_ASSIGN_OR_RETURN(i, FreeSlot(/*wait=*/true));
    TF_RETURN_IF_ERROR(StartRead(g, i, -1));
  }
  Slot& s = slots_[static_cast<size_t>(i)];
  TF_RETURN_IF_ERROR(SettleRead(s));
  std::memcpy(dst, s.buffer.data(), GroupBytes(g));
  s.last_use = ++clock_;
  return Status::Ok();
}

StatusOr<const void*> GradSpill::Acquire(int g) {
  int i = SlotOf(g);
  if (i >= 0) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    if (s.filling || s.micro != final_micro_) {
      return InternalError("gradient spill: sub-group " + layout_.groups[g].name +
                           " asked for before its gradient is complete");
    }
  } else {
    if (!complete_[g]) {
      return InternalError("gradient spill: sub-group " + layout_.groups[g].name +
                           " asked for before this step's gradient of it is complete");
    }
    TF_ASSIGN_OR_RETURN(i, FreeSlot(/*wait=*/true));
    TF_RETURN_IF_ERROR(StartRead(g, i, final_micro_));
  }
  Slot& s = slots_[static_cast<size_t>(i)];
  TF_RETURN_IF_ERROR(SettleRead(s));
  ++s.holds;
  s.last_use = ++clock_;
  return static_cast<const void*>(s.buffer.data());
}

void GradSpill::Release(int g) {
  const int i = SlotOf(g);
  if (i >= 0 && slots_[static_cast<size_t>(i)].holds > 0) --slots_[static_cast<size_t>(i)].holds;
}

Status GradSpill::EndStep() {
  Status first;
  for (Slot& s : slots_) {
    Status w = SettleWrite(s);
    Status r = SettleRead(s);
    if (first.ok() && !w.ok()) first = w;
    if (first.ok() && !r.ok()) first = r;
    s.group = -1;
    s.filling = false;
    s.holds = 0;
    s.micro = -1;
  }
  ResetUnitSums();
  std::fill(complete_.begin(), complete_.end(), 0);
  return first;
}

}  // namespace tierflow

// Streamed weights: the host/NVMe copy of the units off the device and the
// ring of device slots they are fetched into.
#include "engine/streamed_weights.h"

#include <algorithm>
#include <cstring>

#include "common/units.h"
#include "engine/swap_store_options.h"
#include "offload/aligned_buffer.h"
#include "optim/parallel_copy.h"

namespace tierflow {
namespace {
constexpr uint64_t kPage = 4096;
}  // namespace

std::string StreamedWeightsRunId(const std::string& run_id) { return run_id + "-params"; }

StatusOr<std::unique_ptr<StreamedWeights>> StreamedWeights::Create(
    Device& device, const std::vector<UnitInfo>& units, const std::vector<int>& schedule,
    const Config& config) {
  TF_RETURN_IF_ERROR(CheckConfig(config));
  const ParamStreaming& p = config.params;
  std::unique_ptr<StreamedWeights> w(new StreamedWeights(config));
  const size_t n = units.size();
  w->streamed_.assign(n, 0);
  w->unit_params_.resize(n);
  w->unit_names_.resize(n);
  w->host_offset_.assign(n, 0);
  w->held_slot_.assign(n, -1);
  w->unit_write_.resize(n);
  for (size_t u = 0; u < n; ++u) {
    w->unit_params_[u] = units[u].num_params;
    w->unit_names_[u] = units[u].name;
  }
  for (int u : p.streamed_units) {
    if (u < 0 || static_cast<size_t>(u) >= n) {
      return InvalidArgumentError("parameter offload: streamed unit " + std::to_string(u) +
                                  " is not one of the model's " + std::to_string(n) + " units");
    }
    if (w->streamed_[u]) {
      return InvalidArgumentError("parameter offload: unit " + units[u].name +
                                  " is listed twice as streamed");
    }
    w->streamed_[u] = 1;
    w->host_offset_[u] = w->streamed_params_;
    w->streamed_params_ += units[u].num_params;
    w->slot_params_ = std::max(w->slot_params_, units[u].num_params);
  }
  for (int u : schedule) {
    if (u < 0 || static_cast<size_t>(u) >= n) {
      return InvalidArgumentError("the model's weights schedule names unit " + std::to_string(u) +
                                  " of " + std::to_string(n));
    }
    if (w->streamed_[u]) w->fetch_units_.push_back(u);
  }
  for (int u : p.streamed_units) {
    if (std::find(w->fetch_units_.begin(), w->fetch_units_.end(), u) == w->fetch_units_.end()) {
      return InvalidArgumentError("parameter offload: streamed unit " + units[u].name +
                                  " never appears in the model's weights schedule");
    }
  }
  TF_RETURN_IF_ERROR(w->AllocateSlots(device));
  if (p.where == ParamOffload::kHost) {
    TF_ASSIGN_OR_RETURN(w->host_copy_, device.AllocatePinned(w->streamed_params_ * w->wbytes(),
                                                             "streamed weights (host copy)"));
    return w;
  }
  TF_RETURN_IF_ERROR(w->CreateSwapSet(device, units));
  return w;
}

Status StreamedWeights::CheckConfig(const Config& config) {
  const ParamStreaming& p = config.params;
  if (p.where != ParamOffload::kHost && p.where != ParamOffload::kNvme) {
    return InvalidArgumentError("parameter offload: streamed weights live on host or nvme, not " +
                                std::string(ParamOffloadName(p.where)));
  }
  if (p.streamed_units.empty()) {
    return InvalidArgumentError("parameter offload to " + std::string(ParamOffloadName(p.where)) +
                                " names no streamed units");
  }
  if (p.device_slots < 2) {
    return InvalidArgumentError("parameter offload needs at least 2 device slots, not " +
                                std::to_string(p.device_slots) + " (one in use, one being filled)");
  }
  if (p.prefetch_depth < 1 || p.prefetch_depth > p.device_slots - 1) {
    return InvalidArgumentError("parameter offload: prefetch depth " +
                                std::to_string(p.prefetch_depth) + " must be 1.." +
                                std::to_string(p.device_slots - 1) + " with " +
                                std::to_string(p.device_slots) + " device slots");
  }
  if (p.where == ParamOffload::kNvme && p.nvme_staging < 1) {
    return InvalidArgumentError("parameter offload to nvme needs at least 1 staging buffer");
  }
  return Status::Ok();
}

Status StreamedWeights::AllocateSlots(Device& device) {
  const ParamStreaming& p = config_.params;
  TF_ASSIGN_OR_RETURN(stream_, device.CreateStream("h2d params"));
  const uint64_t slot_bytes = slot_params_ * wbytes();
  slots_.resize(static_cast<size_t>(p.device_slots));
  for (size_t s = 0; s < slots_.size(); ++s) {
    Slot& slot = slots_[s];
    StatusOr<DeviceBuffer> buffer = device.Allocate(slot_bytes, "streamed weight slot");
    if (!buffer.ok()) {
      return OutOfMemoryError(
          "parameter offload: the device has no room for its " + std::to_string(p.device_slots) +
          " weight slots of " + FormatBytes(slot_bytes) + " each (the largest streamed unit, " +
          std::to_string(slot_params_) + " parameters; " + FormatBytes(s * slot_bytes) +
          " were allocated before slot " + std::to_string(s + 1) +
          " failed); use fewer slots, a smaller micro-batch, or more device memory (" +
          buffer.status().message() + ")");
    }
    slot.buffer = std::move(*buffer);
    TF_ASSIGN_OR_RETURN(slot.loaded, device.CreateEvent(false));
    TF_ASSIGN_OR_RETURN(slot.released, device.CreateEvent(false));
  }
  return Status::Ok();
}

Status StreamedWeights::CreateSwapSet(Device& device, const std::vector<UnitInfo>& units) {
  const Config& config = config_;
  const ParamStreaming& p = config.params;
  const uint64_t slot_bytes = slot_params_ * wbytes();
  // kNvme: one tensor per streamed unit.
  if (config.nvme.paths.empty()) {
    return InvalidArgumentError(
        "parameter offload to nvme needs at least one directory (--nvme-path DIR)");
  }
  std::vector<offload::TensorSpec> specs;
  tensor_of_.assign(units.size(), 0);
  for (int u : p.streamed_units) {
    tensor_of_[u] = static_cast<offload::TensorId>(specs.size());
    specs.push_back({units[u].name + "/weights", config.dtype, UnitBytes(u)});
  }
  // Its own swap set beside the optimizer state's (a run id names one set);
  // two units may be rewriting at once (the write-back buffers).
  SwapSetConfig set = config.nvme;
  if (!set.run_id.empty()) set.run_id = StreamedWeightsRunId(set.run_id);
  const offload::StateStoreOptions so =
      SwapStoreOptions(set, kStreamedSpareSlotsPerDirectory * slot_bytes);
  TF_ASSIGN_OR_RETURN(store_, offload::StateStore::Create(so, specs));
  const uint64_t staged = offload::RoundUp(slot_bytes, kPage);
  std::vector<iovec> iovecs;
  staging_.resize(static_cast<size_t>(p.nvme_staging));
  for (Staging& s : staging_) {
    TF_ASSIGN_OR_RETURN(s.buffer, device.AllocatePinned(staged, "streamed weight staging"));
    TF_ASSIGN_OR_RETURN(s.copied, device.CreateEvent(false));
    iovecs.push_back({s.buffer.data(), staged});
  }
  write_back_.resize(kStreamedWriteBackBuffers);
  for (WriteBack& b : write_back_) {
    TF_ASSIGN_OR_RETURN(b.buffer, offload::AlignedBuffer::Allocate(staged));
    iovecs.push_back({b.buffer.data(), staged});
  }
  // A memlock refusal is kept in the store's stats; I/O goes on unregistered.
  (void)store_->RegisterBuffers(iovecs);
  return Status::Ok();
}

StreamedWeights::~StreamedWeights() {
  if (stream_) (void)stream_->Synchronize();
  if (store_) {
    (void)Flush();
    (void)store_->Close();
  }
}

Status StreamedWeights::BeginPass(int micro_batches, ReadyFn ready) {
  if (micro_batches < 1) return InvalidArgumentError("streamed weights: a pass of no micro-batch");
  // A pass an error abandoned (the caller drained the compute stream) holds
  // nothing any more; the ring's own stream orders later uploads after its
  // earlier ones. The copy may have changed since: nothing in a slot is current.
  for (Slot& s : slots_) {
    s.unit = -1;
    s.pins = 0;
  }
  std::fill(held_slot_.begin(), held_slot_.end(), -1);
  ready_ = std::move(ready);
  in_pass_ = true;
  pass_fetches_ = static_cast<uint64_t>(micro_batches) * fetch_units_.size();
  next_take_ = 0;
  issued_upto_ = 0;
  fetch_slot_.assign(pass_fetches_, -1);
  return Pump();
}

int StreamedWeights::ChooseSlot(uint64_t index) const {
  int best = -1;
  uint64_t best_next = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.pins != 0) continue;
    if (slot.unit < 0) return static_cast<int>(s);
    // When the pass needs this slot's unit next (never: the end of the pass).
    uint64_t next = pass_fetches_;
    for (uint64_t i = index + 1; i < pass_fetches_; ++i) {
      if (UnitOfFetch(i) == slot.unit) {
        next = i;
        break;
      }
    }
    if (best < 0 || next > best_next) {
      best = static_cast<int>(s);
      best_next = next;
    }
  }
  return best;
}

Status StreamedWeights::Issue(uint64_t index, bool wait, bool* issued) {
  *issued = false;
  const int unit = UnitOfFetch(index);
  // Still in a slot from an earlier fetch of this pass: nothing to upload.
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].unit == unit) {
      ++slots_[s].pins;
      fetch_slot_[index] = static_cast<int>(s);
      *issued = true;
      return Status::Ok();
    }
  }
  const int s = ChooseSlot(index);
  if (s < 0) {
    if (!wait) return Status::Ok();
    return FailedPreconditionError(
        "parameter offload: the model holds all " + std::to_string(slots_.size()) +
        " weight slots and takes " + unit_names_[unit] +
        "; release a unit's weights before taking the next, or use more device slots");
  }
  TF_ASSIGN_OR_RETURN(bool ready, ready_(unit, wait));
  if (!ready) return Status::Ok();
  const uint64_t bytes = UnitBytes(unit);
  Slot& slot = slots_[s];
  const void* src = nullptr;
  Staging* staging = nullptr;
  offload::IoTicket read;
  if (store_) {
    staging = &staging_[next_staging_];
    offload::IoTicket last_write;
    {
      std::lock_guard<std::mutex> lock(writes_mu_);
      last_write = unit_write_[unit];
    }
    if (!wait && (!staging->copied->Query() || !last_write.done())) return Status::Ok();
    TF_RETURN_IF_ERROR(staging->copied->HostWait());
    // A read issued before the unit's write has landed would read the old copy.
    TF_RETURN_IF_ERROR(last_write.Wait());
    next_staging_ = (next_staging_ + 1) % staging_.size();
    TF_ASSIGN_OR_RETURN(read,
                        store_->ReadAsync(tensor_of_[unit], staging->buffer.data(), 0, bytes));
    src = staging->buffer.data();
    transferred_.nvme_read_bytes += bytes;
  } else {
    src = host_copy_.as<char>() + host_offset_[unit] * wbytes();
  }
  // The slot's last readers must be done before it is overwritten.
  TF_RETURN_IF_ERROR(stream_->Wait(*slot.released));
  if (store_) {
    TF_RETURN_IF_ERROR(stream_->HostCallback([read] { return read.Wait(); }));
  }
  DeviceSpans::Started span;
  if (config_.spans != nullptr) {
    TF_ASSIGN_OR_RETURN(span, config_.spans->Begin(*stream_));
  }
  TF_RETURN_IF_ERROR(stream_->CopyHostToDevice(slot.buffer.data(), src, bytes));
  if (config_.spans != nullptr) {
    TF_RETURN_IF_ERROR(config_.spans->End(*stream_, std::move(span), "h2d_params",
                                          "weights " + unit_names_[unit]));
  }
  if (staging != nullptr) TF_RETURN_IF_ERROR(stream_->Record(*staging->copied));
  TF_RETURN_IF_ERROR(stream_->Record(*slot.loaded));
  slot.unit = unit;
  slot.pins = 1;
  fetch_slot_[index] = s;
  transferred_.h2d_bytes += bytes;
  *issued = true;
  return Status::Ok();
}

Status StreamedWeights::Pump() {
  if (!in_pass_) return Status::Ok();
  const uint64_t limit = std::min(
      pass_fetches_, next_take_ + 1 + static_cast<uint64_t>(config_.params.prefetch_depth));
  while (issued_upto_ < limit) {
    bool issued = false;
    TF_RETURN_IF_ERROR(Issue(issued_upto_, /*wait=*/false, &issued));
    if (!issued) break;
    ++issued_upto_;
  }
  return Status::Ok();
}

StatusOr<void*> StreamedWeights::Take(int unit, Stream& compute) {
  if (!in_pass_ || next_take_ >= pass_fetches_) {
    return FailedPreconditionError("streamed weights: the model takes " + unit_names_[unit] +
                                   " more often than its weights schedule says");
  }
  const int expected = UnitOfFetch(next_take_);
  if (expected != unit) {
    return FailedPreconditionError("streamed weights: the model takes " + unit_names_[unit] +
                                   " where its weights schedule says " + unit_names_[expected]);
  }
  if (held_slot_[unit] >= 0) {
    return FailedPreconditionError("streamed weights: " + unit_names_[unit] +
                                   " is taken again before its release");
  }
  if (issued_upto_ == next_take_) {
    bool issued = false;
    TF_RETURN_IF_ERROR(Issue(next_take_, /*wait=*/true, &issued));
    if (!issued) return InternalError("streamed weights: a fetch that waited was not issued");
    ++issued_upto_;
  }
  const int s = fetch_slot_[next_take_];
  ++next_take_;
  held_slot_[unit] = s;
  TF_RETURN_IF_ERROR(compute.Wait(*slots_[s].loaded));
  TF_RETURN_IF_ERROR(Pump());
  return slots_[s].buffer.data();
}

Status StreamedWeights::Release(int unit, Stream& compute) {
  const int s = held_slot_[unit];
  if (s < 0) {
    return FailedPreconditionError("streamed weights: " + unit_names_[unit] +
                                   " is released without being taken");
  }
  held_slot_[unit] = -1;
  TF_RETURN_IF_ERROR(compute.Record(*slots_[s].released));
  --slots_[s].pins;
  return Pump();
}

Status StreamedWeights::EndPass() {
  if (!in_pass_) return Status::Ok();
  in_pass_ = false;
  ready_ = nullptr;
  for (size_t u = 0; u < held_slot_.size(); ++u) {
    if (held_slot_[u] >= 0) {
      return FailedPreconditionError("streamed weights: the model left " + unit_names_[u] +
                                     "'s weights taken (Weights without ReleaseWeights)");
    }
  }
  if (next_take_ != pass_fetches_) {
    // Fetches issued ahead and never taken still hold their slots.
    for (Slot& s : slots_) s.pins = 0;
    return FailedPreconditionError(
        "streamed weights: the model took " + std::to_string(next_take_) + " of the " +
        std::to_string(pass_fetches_) + " streamed fetches its weights schedule says");
  }
  return Status::Ok();
}

StreamedWeights::Transferred StreamedWeights::TakeTransferred() {
  Transferred t = transferred_;
  transferred_ = {};
  return t;
}

Status StreamedWeights::WriteRange(int unit, uint64_t unit_offset, const void* src,
                                   uint64_t count) {
  TF_ASSIGN_OR_RETURN(void* dst, RangeForWrite(unit, unit_offset, count));
  const size_t bytes = count * wbytes();
  if (!store_) {
    ParallelCopy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
  return Status::Ok();
}

StatusOr<void*> StreamedWeights::RangeForWrite(int unit, uint64_t unit_offset, uint64_t count) {
  if (unit < 0 || static_cast<size_t>(unit) >= streamed_.size() || !streamed_[unit] ||
      unit_offset > unit_params_[unit] || count > unit_params_[unit] - unit_offset) {
    return InternalError("streamed weights: a write outside a streamed unit");
  }
  if (!store_) {
    return static_cast<void*>(host_copy_.as<char>() +
                              (host_offset_[unit] + unit_offset) * wbytes());
  }
  if (assembling_unit_ != unit) {
    if (assembling_unit_ >= 0) {
      return InternalError("streamed weights: " + unit_names_[unit] + " is written while " +
                           unit_names_[assembling_unit_] + " is not finished");
    }
    WriteBack& b = write_back_[next_write_back_];
    TF_RETURN_IF_ERROR(b.ticket.Wait());  // its previous unit's write
    assembling_unit_ = unit;
    assembling_buffer_ = static_cast<int>(next_write_back_);
    next_write_back_ = (next_write_back_ + 1) % write_back_.size();
  }
  return static_cast<void*>(write_back_[assembling_buffer_].buffer.data() + unit_offset * wbytes());
}

Status StreamedWeights::FinishUnit(int unit) {
  if (!store_) return Status::Ok();
  if (assembling_unit_ != unit) {
    return InternalError("streamed weights: " + unit_names_[unit] + " finished but not written");
  }
  WriteBack& b = write_back_[assembling_buffer_];
  assembling_unit_ = -1;
  TF_ASSIGN_OR_RETURN(b.ticket,
                      store_->WriteAsync(tensor_of_[unit], b.buffer.data(), 0, UnitBytes(unit)));
  std::lock_guard<std::mutex> lock(writes_mu_);
  unit_write_[unit] = b.ticket;
  return Status::Ok();
}

Status StreamedWeights::Flush() {
  Status first;
  for (WriteBack& b : write_back_) {
    Status s = b.ticket.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status StreamedWeights::ReadUnit(int unit, void* out) {
  if (!streamed(unit)) return InternalError("streamed weights: ReadUnit of a resident unit");
  if (!store_) {
    std::memcpy(out, host_copy_.as<char>() + host_offset_[unit] * wbytes(), UnitBytes(unit));
    return Status::Ok();
  }
  TF_RETURN_IF_ERROR(Flush());
  TF_ASSIGN_OR_RETURN(offload::AlignedBuffer buffer,
                      offload::AlignedBuffer::Allocate(offload::RoundUp(UnitBytes(unit), kPage)));
  TF_ASSIGN_OR_RETURN(offload::IoTicket t,
                      store_->ReadAsync(tensor_of_[unit], buffer.data(), 0, UnitBytes(unit)));
  TF_RETURN_IF_ERROR(t.Wait());
  std::memcpy(out, buffer.data(), UnitBytes(unit));
  return Status::Ok();
}

uint64_t StreamedWeights::HostBytes() const {
  if (!store_) return streamed_params_ * wbytes();
  return (staging_.size() + write_back_.size()) * offload::RoundUp(slot_params_ * wbytes(), kPage);
}

uint64_t StreamedWeights::NvmeFileBytes() const { return store_ ? store_->stats().file_bytes : 0; }

}  // namespace tierflow

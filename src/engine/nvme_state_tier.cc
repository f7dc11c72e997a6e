// Optimizer state on NVMe through the io_uring StateStore.
#include "engine/nvme_state_tier.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "common/units.h"
#include "engine/swap_store_options.h"

namespace tierflow {
namespace {
constexpr uint64_t kPage = 4096;
uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
}  // namespace

// Timestamps I/O completions for the trace: the store's tickets have no
// completion callback, so a thread polls the in-flight ones (cheap: a handful).
class NvmeStateTier::CompletionWatcher {
 public:
  explicit CompletionWatcher(TraceRecorder* trace) : trace_(trace), thread_([this] { Loop(); }) {}
  ~CompletionWatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Watch(offload::IoTicket ticket, std::string track, std::string name) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(
          {std::move(ticket), std::move(track), std::move(name), TraceRecorder::Clock::now()});
    }
    cv_.notify_all();
  }

 private:
  struct Pending {
    offload::IoTicket ticket;
    std::string track, name;
    TraceRecorder::Clock::time_point start;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty() && stop_) return;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->ticket.done()) {
          trace_->AddSpan(it->track, it->name, it->start, TraceRecorder::Clock::now());
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
      if (stop_) {
        pending_.clear();
        return;
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
    }
  }
  TraceRecorder* trace_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Pending> pending_;
  bool stop_ = false;
  std::thread thread_;
};

NvmeStateTier::NvmeStateTier(const SubGroupLayout& layout, const NvmeTierOptions& options)
    : layout_(layout), options_(options) {}

NvmeStateTier::~NvmeStateTier() {
  (void)Flush();
  watcher_.reset();
  if (store_) (void)store_->Close();
}

uint64_t NvmeStateTier::ArrayStride(int g) const {
  return RoundUp(layout_.groups[g].num_params * sizeof(float), kPage);
}

StatusOr<std::unique_ptr<NvmeStateTier>> NvmeStateTier::Create(const SubGroupLayout& layout,
                                                               const std::vector<int>& groups,
                                                               const NvmeTierOptions& options,
                                                               Device& device) {
  if (options.swap.paths.empty()) {
    return InvalidArgumentError("NVMe offload needs at least one directory (--nvme-path DIR)");
  }
  if (options.slots < 2) return InvalidArgumentError("NVMe tier needs at least 2 slots");
  std::unique_ptr<NvmeStateTier> tier(new NvmeStateTier(layout, options));
  std::vector<offload::TensorSpec> specs;
  uint64_t max_bytes = 0;
  tier->tensor_of_.assign(layout.groups.size(), 0);
  for (int g : groups) {
    tier->tensor_of_[g] = static_cast<offload::TensorId>(specs.size());
    if (options.two_copies) {
      specs.push_back({layout.groups[g].name + "/state.0", DType::kF32, tier->TensorBytes(g)});
      specs.push_back({layout.groups[g].name + "/state.1", DType::kF32, tier->TensorBytes(g)});
    } else {
      specs.push_back({layout.groups[g].name + "/state", DType::kF32, tier->TensorBytes(g)});
    }
    max_bytes = std::max(max_bytes, tier->TensorBytes(g));
  }
  uint64_t max_grad_bytes = 0;
  if (options.grad_dtype.has_value()) {
    if (groups.size() != layout.groups.size()) {
      return InvalidArgumentError(
          "gradients on NVMe need every sub-group's state on NVMe (nvme_ratio 1)");
    }
    tier->grad_tensor_of_.assign(layout.groups.size(), 0);
    for (int g : groups) {
      tier->grad_tensor_of_[g] = static_cast<offload::TensorId>(specs.size());
      const uint64_t bytes = layout.groups[g].num_params * DTypeSize(*options.grad_dtype);
      specs.push_back({layout.groups[g].name + "/grad", *options.grad_dtype, bytes});
      max_grad_bytes = std::max(max_grad_bytes, bytes);
    }
  }
  tier->current_.assign(layout.groups.size(), 0);
  tier->pending_.assign(layout.groups.size(), 0);
  // Every slot may be writing at once: leave room for all of them to land on new blocks.
  // And the gradient slots' writes beside them.
  const offload::StateStoreOptions so = SwapStoreOptions(
      options.swap, static_cast<uint64_t>(options.slots + 1) * max_bytes +
                        static_cast<uint64_t>(std::max(options.grad_slots, 0)) * max_grad_bytes);
  TF_ASSIGN_OR_RETURN(tier->store_, offload::StateStore::Create(so, specs));
  tier->slot_bytes_ = RoundUp(max_bytes, kPage);
  tier->slots_.resize(static_cast<size_t>(options.slots));
  std::vector<iovec> iovecs;
  for (Slot& s : tier->slots_) {
    TF_ASSIGN_OR_RETURN(s.buffer, device.AllocatePinned(tier->slot_bytes_, "NVMe state slot"));
    iovecs.push_back({s.buffer.data(), tier->slot_bytes_});
  }
  // A memlock refusal is reported by the store (stats) and I/O goes on unregistered.
  (void)tier->store_->RegisterBuffers(iovecs);
  if (options.trace != nullptr) tier->watcher_ = std::make_unique<CompletionWatcher>(options.trace);
  return tier;
}

int NvmeStateTier::SlotOf(int g) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.state != SlotState::kFree && s.group == g && s.copy == current_[g]) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Status NvmeStateTier::Settle(Slot& slot) {
  Status s = slot.ticket.Wait();
  if (slot.state == SlotState::kWriting) {
    slot.state = SlotState::kFree;
    slot.group = -1;
  }
  slot.ticket = offload::IoTicket();
  return s;
}

StatusOr<int> NvmeStateTier::FreeSlot(bool wait) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == SlotState::kFree) return static_cast<int>(i);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == SlotState::kWriting && slots_[i].ticket.done()) {
      TF_RETURN_IF_ERROR(Settle(slots_[i]));
      return static_cast<int>(i);
    }
  }
  if (!wait) return -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == SlotState::kWriting) {
      TF_RETURN_IF_ERROR(Settle(slots_[i]));
      return static_cast<int>(i);
    }
  }
  // Only read-aheads left: drop one (its read must land before the buffer is reused).
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == SlotState::kReading) {
      TF_RETURN_IF_ERROR(Settle(slots_[i]));
      slots_[i].state = SlotState::kFree;
      slots_[i].group = -1;
      return static_cast<int>(i);
    }
  }
  return InternalError("NVMe tier: all " + std::to_string(slots_.size()) +
                       " slots are held by sub-groups being updated; raise buffer_count");
}

Status NvmeStateTier::StartRead(int g, int slot_index) {
  Slot& slot = slots_[slot_index];
  // A write of g's current copy may still be in flight in another slot's
  // hands only if SlotOf found it; a finished write is on disk.
  TF_ASSIGN_OR_RETURN(slot.ticket, store_->ReadAsync(TensorOf(g, current_[g]), slot.buffer.data(),
                                                     0, TensorBytes(g)));
  slot.state = SlotState::kReading;
  slot.group = g;
  slot.copy = current_[g];
  bytes_read_ += TensorBytes(g);
  if (watcher_) watcher_->Watch(slot.ticket, "nvme-read", layout_.groups[g].name);
  return Status::Ok();
}

StateView NvmeStateTier::ViewOf(int g, Slot& slot) {
  char* base = static_cast<char*>(slot.buffer.data());
  const uint64_t stride = ArrayStride(g);
  return StateView{reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + stride),
                   reinterpret_cast<float*>(base + 2 * stride)};
}

Status NvmeStateTier::ReclaimFinishedWrites() {
  for (Slot& slot : slots_) {
    if (slot.state == SlotState::kWriting && slot.ticket.done()) TF_RETURN_IF_ERROR(Settle(slot));
  }
  return Status::Ok();
}

Status NvmeStateTier::StartPrefetch(int g, bool wait_for_writes) {
  if (SlotOf(g) >= 0) return Status::Ok();
  // A landed write frees its slot only when settled: do that first, or read-
  // ahead finds no free slot while the disk idles.
  TF_RETURN_IF_ERROR(ReclaimFinishedWrites());
  // Read ahead only into a free slot, and keep one slot for the next Acquire
  // of a group not read ahead: a free one, or one whose write will land (an
  // Acquire waits for a write rather than dropping a read-ahead). One 48 MB
  // read nearly saturates a disk, but the disk idles whenever none is queued.
  auto count = [&](SlotState state) {
    int n = 0;
    for (const Slot& slot : slots_) n += slot.state == state;
    return n;
  };
  auto can_read = [&] {
    const int free = count(SlotState::kFree);
    return free >= 1 && free + count(SlotState::kWriting) >= 2;
  };
  while (!can_read() && wait_for_writes) {
    Slot* writing = nullptr;
    for (Slot& slot : slots_) {
      if (slot.state == SlotState::kWriting) {
        writing = &slot;
        break;
      }
    }
    if (writing == nullptr) break;
    TF_RETURN_IF_ERROR(Settle(*writing));
  }
  if (!can_read()) return Status::Ok();  // Acquire will read it
  TF_ASSIGN_OR_RETURN(int s, FreeSlot(/*wait=*/false));
  return StartRead(g, s);
}

Status NvmeStateTier::Prefetch(int g) { return StartPrefetch(g, /*wait_for_writes=*/false); }

Status NvmeStateTier::PrefetchWaitingForWrites(int g) {
  return StartPrefetch(g, /*wait_for_writes=*/true);
}

StatusOr<StateView> NvmeStateTier::Acquire(int g) {
  int s = SlotOf(g);
  if (s < 0) {
    TF_ASSIGN_OR_RETURN(s, FreeSlot(/*wait=*/true));
    TF_RETURN_IF_ERROR(StartRead(g, s));
  }
  Slot& slot = slots_[s];
  if (slot.state == SlotState::kReading) {
    TF_RETURN_IF_ERROR(slot.ticket.Wait());
    slot.ticket = offload::IoTicket();
  } else if (slot.state == SlotState::kWriting) {
    // Still being written: the slot holds the newest data; reuse it once the
    // write has landed (the buffer must not change under the write).
    TF_RETURN_IF_ERROR(slot.ticket.Wait());
    slot.ticket = offload::IoTicket();
  }
  slot.state = SlotState::kHeld;
  slot.group = g;
  return ViewOf(g, slot);
}

Status NvmeStateTier::StartWrite(int g, int slot_index, int copy) {
  // An earlier write of the same copy (an aborted speculation) may still be in
  // flight: writes to the same blocks land in any order, so let it land first.
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& other = slots_[i];
    if (static_cast<int>(i) != slot_index && other.state == SlotState::kWriting &&
        other.group == g && other.copy == copy) {
      TF_RETURN_IF_ERROR(Settle(other));
    }
  }
  Slot& slot = slots_[slot_index];
  TF_ASSIGN_OR_RETURN(slot.ticket,
                      store_->WriteAsync(TensorOf(g, copy), slot.buffer.data(), 0, TensorBytes(g)));
  slot.state = SlotState::kWriting;
  slot.copy = copy;
  bytes_written_ += TensorBytes(g);
  if (watcher_) watcher_->Watch(slot.ticket, "nvme-write", layout_.groups[g].name);
  return Status::Ok();
}

Status NvmeStateTier::Release(int g, bool modified) {
  const int s = SlotOf(g);
  if (s < 0 || slots_[s].state != SlotState::kHeld) {
    return InternalError("NVMe tier: Release of " + layout_.groups[g].name + " not acquired");
  }
  Slot& slot = slots_[s];
  if (!modified) {
    slot.state = SlotState::kFree;
    slot.group = -1;
    return Status::Ok();
  }
  // With two copies the write goes to the other one, which then becomes current.
  const int copy = options_.two_copies ? 1 - current_[g] : current_[g];
  TF_RETURN_IF_ERROR(StartWrite(g, s, copy));
  current_[g] = copy;
  return Status::Ok();
}

Status NvmeStateTier::ReleaseSpeculative(int g) {
  const int s = SlotOf(g);
  if (!options_.two_copies || s < 0 || slots_[s].state != SlotState::kHeld) {
    return InternalError("NVMe tier: ReleaseSpeculative of " + layout_.groups[g].name +
                         (options_.two_copies ? " not acquired" : " without two copies"));
  }
  TF_RETURN_IF_ERROR(StartWrite(g, s, 1 - current_[g]));
  pending_[g] = 1;
  return Status::Ok();
}

Status NvmeStateTier::Commit(int g) {
  if (!pending_[g])
    return InternalError("NVMe tier: nothing to commit for " + layout_.groups[g].name);
  pending_[g] = 0;
  current_[g] = 1 - current_[g];
  return Status::Ok();
}

Status NvmeStateTier::Abort(int g) {
  if (!pending_[g])
    return InternalError("NVMe tier: nothing to abort for " + layout_.groups[g].name);
  pending_[g] = 0;  // the slot (if still writing) holds the other copy: SlotOf ignores it
  return Status::Ok();
}

Status NvmeStateTier::Flush() {
  Status first;
  for (Slot& slot : slots_) {
    if (slot.state == SlotState::kWriting || slot.state == SlotState::kReading) {
      const bool reading = slot.state == SlotState::kReading;
      Status s = Settle(slot);
      if (reading) {  // a read-ahead nobody will use: drop it
        slot.state = SlotState::kFree;
        slot.group = -1;
      }
      if (first.ok() && !s.ok()) first = s;
    }
  }
  return first;
}

Status NvmeStateTier::Write(int g, const float* master, const float* exp_avg,
                            const float* exp_avg_sq) {
  TF_RETURN_IF_ERROR(Flush());
  TF_ASSIGN_OR_RETURN(int s, FreeSlot(/*wait=*/true));
  Slot& slot = slots_[s];
  std::memset(slot.buffer.data(), 0, TensorBytes(g));
  StateView v = ViewOf(g, slot);
  const size_t n = layout_.groups[g].num_params;
  std::memcpy(v.master, master, n * 4);
  if (exp_avg) std::memcpy(v.exp_avg, exp_avg, n * 4);
  if (exp_avg_sq) std::memcpy(v.exp_avg_sq, exp_avg_sq, n * 4);
  Status st = store_->Write(TensorOf(g, current_[g]), slot.buffer.data());
  bytes_written_ += TensorBytes(g);
  return st.WithContext("writing optimizer state of " + layout_.groups[g].name);
}

Status NvmeStateTier::Read(int g, float* master, float* exp_avg, float* exp_avg_sq) {
  // Only the store blocks that hold the arrays asked for: a checkpoint
  // streams one array of a unit at a time, and reading the whole state for
  // each read three times what it writes (seen on the first GPU run's 1B model).
  const int first = master != nullptr ? 0 : exp_avg != nullptr ? 1 : exp_avg_sq != nullptr ? 2 : 3;
  const int last = exp_avg_sq != nullptr ? 2 : exp_avg != nullptr ? 1 : master != nullptr ? 0 : -1;
  if (first > last) return Status::Ok();
  TF_RETURN_IF_ERROR(Flush());
  TF_ASSIGN_OR_RETURN(int s, FreeSlot(/*wait=*/true));
  Slot& slot = slots_[s];
  const uint64_t block = store_->block_size_bytes(), stride = ArrayStride(g);
  const uint64_t begin = static_cast<uint64_t>(first) * stride / block * block;
  const uint64_t end =
      std::min(TensorBytes(g), RoundUp((static_cast<uint64_t>(last) + 1) * stride, block));
  char* base = static_cast<char*>(slot.buffer.data());
  StatusOr<offload::IoTicket> ticket =
      store_->ReadAsync(TensorOf(g, current_[g]), base + begin, begin, end - begin);
  const Status read = ticket.ok() ? ticket->Wait() : ticket.status();
  TF_RETURN_IF_ERROR(read.WithContext("reading optimizer state of " + layout_.groups[g].name));
  bytes_read_ += end - begin;
  StateView v = ViewOf(g, slot);
  const size_t n = layout_.groups[g].num_params;
  if (master) std::memcpy(master, v.master, n * 4);
  if (exp_avg) std::memcpy(exp_avg, v.exp_avg, n * 4);
  if (exp_avg_sq) std::memcpy(exp_avg_sq, v.exp_avg_sq, n * 4);
  return Status::Ok();
}

TierStats NvmeStateTier::Stats() const {
  TierStats s;
  s.bytes_read = bytes_read_;
  s.bytes_written = bytes_written_;
  s.host_bytes = slot_bytes_ * slots_.size();
  return s;
}

}  // namespace tierflow

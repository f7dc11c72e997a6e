// Streams of the emulated CPU accelerator.
#include "device/cpu/cpu_stream.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/streaming_copy.h"
#include "device/cpu/cpu_device.h"
#include "device/cpu/cpu_event.h"
#include "device/sim/sim_timing.h"

namespace tierflow {

CpuStream::CpuStream(CpuDevice* device, std::string name)
    : device_(device), name_(std::move(name)), worker_([this] { WorkerLoop(); }) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

DeviceKind CpuStream::device_kind() const { return device_->kind(); }

Status CpuStream::Enqueue(std::function<Status()> fn, bool runs_after_error, double sim_seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sticky_error_.ok()) return sticky_error_;
    queue_.push_back(Item{std::move(fn), runs_after_error, sim_seconds, Clock::now()});
    ++enqueued_;
  }
  work_cv_.notify_one();
  return Status::Ok();
}

void CpuStream::WorkerLoop() {
  for (;;) {
    Item item;
    bool skip = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Drain everything before stopping: the destructor waits for queued work.
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      skip = !sticky_error_.ok() && !item.runs_after_error;
    }
    Status result = skip ? Status::Ok() : RunItem(item);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!result.ok() && sticky_error_.ok()) {
        sticky_error_ = result.WithContext("stream '" + name_ + "'");
      }
      ++finished_;
    }
    idle_cv_.notify_all();
  }
}

Status CpuStream::RunItem(Item& item) {
  if (item.sim_seconds < 0) {
    Status s = item.fn();
    sim_busy_until_ = std::max(sim_busy_until_, Clock::now());
    return s;
  }
  const Clock::time_point start = std::max(sim_busy_until_, item.enqueued_at);
  const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(item.sim_seconds));
  Status s = item.fn ? item.fn() : Status::Ok();
  // Work slower than its model (a large memcpy) ends when it really ended;
  // a late wake-up from the sleep does not move the modelled end.
  const Clock::time_point work_done = Clock::now();
  std::this_thread::sleep_until(end);
  sim_busy_until_ = std::max(end, work_done);
  return s;
}

Status CpuStream::CopyHostToDevice(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(dst, n, "CopyHostToDevice destination"));
  if (device_->sim()) device_->sim_written().MarkWritten(dst, n);
  return Enqueue(
      [=] {
        StreamingCopy(dst, src, n);
        return Status::Ok();
      },
      false, device_->sim() ? SimLinkSeconds(*device_->sim(), n) : -1);
}

Status CpuStream::CopyDeviceToHost(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(src, n, "CopyDeviceToHost source"));
  if (device_->sim() != nullptr && device_->sim_written().FindWritten(src, n).empty()) {
    // Nothing wrote the source (sim_written_ranges.h): it reads as zeros,
    // and writing zeros costs the host half of what copying them does.
    return Enqueue(
        [=] {
          StreamingZero(dst, n);
          return Status::Ok();
        },
        false, SimLinkSeconds(*device_->sim(), n));
  }
  return Enqueue(
      [=] {
        StreamingCopy(dst, src, n);
        return Status::Ok();
      },
      false, device_->sim() ? SimLinkSeconds(*device_->sim(), n) : -1);
}

Status CpuStream::CopyDeviceToDevice(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(dst, n, "CopyDeviceToDevice destination"));
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(src, n, "CopyDeviceToDevice source"));
  if (device_->sim() != nullptr) return SimCopyDeviceToDevice(dst, src, n);
  return Enqueue([=] {
    if (n) std::memmove(dst, src, n);
    return Status::Ok();
  });
}

// The sim's device copy moves only the source bytes something wrote
// (sim_written_ranges.h): the destination's written bytes are zeroed, then
// the source's written parts copied over them. Overlapping ranges take the
// plain memmove.
Status CpuStream::SimCopyDeviceToDevice(void* dst, const void* src, size_t n) {
  const double seconds = SimDeviceMemorySeconds(*device_->sim(), 2.0 * n);
  SimWrittenRanges& written = device_->sim_written();
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + n && s < d + n) {
    written.MarkWritten(dst, n);
    return Enqueue(
        [=] {
          if (n) std::memmove(dst, src, n);
          return Status::Ok();
        },
        false, seconds);
  }
  auto from = written.FindWritten(src, n);
  auto zero = written.TakeWritten(dst, n);
  const ptrdiff_t shift = static_cast<char*>(dst) - static_cast<const char*>(src);
  for (const auto& [p, len] : from) written.MarkWritten(p + shift, len);
  if (from.empty() && zero.empty()) return Enqueue(nullptr, false, seconds);
  return Enqueue(
      [from = std::move(from), zero = std::move(zero), shift] {
        for (const auto& [p, len] : zero) std::memset(p, 0, len);
        for (const auto& [p, len] : from) std::memcpy(p + shift, p, len);
        return Status::Ok();
      },
      false, seconds);
}

Status CpuStream::Memset(void* dst, int value, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(dst, n, "Memset destination"));
  if (device_->sim() == nullptr) {
    return Enqueue([=] {
      if (n) std::memset(dst, value, n);
      return Status::Ok();
    });
  }
  const double seconds = SimDeviceMemorySeconds(*device_->sim(), n);
  if ((value & 0xff) != 0) {
    device_->sim_written().MarkWritten(dst, n);
    return Enqueue(
        [=] {
          if (n) std::memset(dst, value, n);
          return Status::Ok();
        },
        false, seconds);
  }
  // Zeroing: only the bytes a copy or memset may have made non-zero are
  // written (sim_written_ranges.h); the rest already are zero.
  auto parts = device_->sim_written().TakeWritten(dst, n);
  if (parts.empty()) return Enqueue(nullptr, false, seconds);
  return Enqueue(
      [parts = std::move(parts)] {
        for (const auto& [p, len] : parts) std::memset(p, 0, len);
        return Status::Ok();
      },
      false, seconds);
}

Status CpuStream::Record(Event& event) {
  auto* cpu_event = dynamic_cast<CpuEvent*>(&event);
  if (cpu_event == nullptr)
    return InvalidArgumentError("Record: the event belongs to another device");
  uint64_t generation = cpu_event->BeginRecord();
  Status s = Enqueue(
      [cpu_event, generation] {
        cpu_event->Complete(generation);
        return Status::Ok();
      },
      /*runs_after_error=*/true);
  // A stream in error still completes the record so waiters are released.
  if (!s.ok()) cpu_event->Complete(generation);
  return s;
}

Status CpuStream::Wait(const Event& event) {
  const auto* cpu_event = dynamic_cast<const CpuEvent*>(&event);
  if (cpu_event == nullptr)
    return InvalidArgumentError("Wait: the event belongs to another device");
  uint64_t target = cpu_event->RecordedGeneration();
  if (target == 0) return Status::Ok();
  return Enqueue(
      [cpu_event, target] {
        cpu_event->WaitFor(target);
        return Status::Ok();
      },
      /*runs_after_error=*/true);
}

Status CpuStream::HostCallback(std::function<Status()> fn) { return Enqueue(std::move(fn)); }

Status CpuStream::Launch(Kernel kernel) {
  if (device_->sim() != nullptr) {
    // Not run: its modelled time passes instead (see the class comment).
    return Enqueue(nullptr, false, SimKernelSeconds(*device_->sim(), kernel.cost));
  }
  if (!kernel.host) {
    return UnimplementedError(std::string(kernel.name) +
                              " has no implementation for the cpu device");
  }
  return Enqueue(std::move(kernel.host));
}

Status CpuStream::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t target = enqueued_;
  idle_cv_.wait(lock, [&] { return finished_ >= target; });
  return sticky_error_;
}

}  // namespace tierflow

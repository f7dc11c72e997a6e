// Streams of the emulated CPU accelerator.
#include "device/cpu/cpu_stream.h"

#include <cstring>

#include "device/cpu/cpu_device.h"
#include "device/cpu/cpu_event.h"

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

Status CpuStream::Enqueue(std::function<Status()> fn, bool runs_after_error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sticky_error_.ok()) return sticky_error_;
    queue_.push_back(Item{std::move(fn), runs_after_error});
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
    Status result = skip ? Status::Ok() : item.fn();
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

Status CpuStream::CopyHostToDevice(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(dst, n, "CopyHostToDevice destination"));
  return Enqueue([=] {
    if (n) std::memcpy(dst, src, n);
    return Status::Ok();
  });
}

Status CpuStream::CopyDeviceToHost(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(src, n, "CopyDeviceToHost source"));
  return Enqueue([=] {
    if (n) std::memcpy(dst, src, n);
    return Status::Ok();
  });
}

Status CpuStream::CopyDeviceToDevice(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(dst, n, "CopyDeviceToDevice destination"));
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(src, n, "CopyDeviceToDevice source"));
  return Enqueue([=] {
    if (n) std::memmove(dst, src, n);
    return Status::Ok();
  });
}

Status CpuStream::Memset(void* dst, int value, size_t n) {
  TF_RETURN_IF_ERROR(device_->CheckDeviceRange(dst, n, "Memset destination"));
  return Enqueue([=] {
    if (n) std::memset(dst, value, n);
    return Status::Ok();
  });
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

Status CpuStream::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t target = enqueued_;
  idle_cv_.wait(lock, [&] { return finished_ >= target; });
  return sticky_error_;
}

}  // namespace tierflow

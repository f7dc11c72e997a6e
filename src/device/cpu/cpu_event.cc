// Events of the emulated CPU accelerator.
#include "device/cpu/cpu_event.h"

namespace tierflow {

bool CpuEvent::Query() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= recorded_;
}

Status CpuEvent::HostWait() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t target = recorded_;
  cv_.wait(lock, [&] { return completed_ >= target; });
  return Status::Ok();
}

StatusOr<double> CpuEvent::ElapsedMsSince(const Event& start) const {
  const auto* other = dynamic_cast<const CpuEvent*>(&start);
  if (other == nullptr) return InvalidArgumentError("ElapsedMsSince: events of different devices");
  if (!enable_timing_ || !other->enable_timing_) {
    return InvalidArgumentError("ElapsedMsSince: both events must be created with timing enabled");
  }
  std::chrono::steady_clock::time_point t0, t1;
  {
    std::lock_guard<std::mutex> lock(other->mu_);
    if (other->recorded_ == 0 || other->completed_ < other->recorded_) {
      return FailedPreconditionError("ElapsedMsSince: the start event has not completed");
    }
    t0 = other->completed_at_;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recorded_ == 0 || completed_ < recorded_) {
      return FailedPreconditionError("ElapsedMsSince: the end event has not completed");
    }
    t1 = completed_at_;
  }
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

uint64_t CpuEvent::BeginRecord() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++recorded_;
}

void CpuEvent::Complete(uint64_t generation) {
  // Notify under the lock: a host thread woken by this may destroy the event
  // as soon as it sees the completion, so nothing may touch it after unlock.
  std::lock_guard<std::mutex> lock(mu_);
  if (generation > completed_) {
    completed_ = generation;
    completed_at_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

uint64_t CpuEvent::RecordedGeneration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

void CpuEvent::WaitFor(uint64_t generation) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= generation; });
}

}  // namespace tierflow

// An event of the emulated CPU accelerator: a generation counter that a
// stream's worker thread advances when it reaches the recorded point.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "tierflow/device.h"

namespace tierflow {

class CpuEvent : public Event {
 public:
  explicit CpuEvent(bool enable_timing) : enable_timing_(enable_timing) {}

  bool Query() const override;
  Status HostWait() override;
  StatusOr<double> ElapsedMsSince(const Event& start) const override;

  // Called by Stream::Record at enqueue time: the generation the stream will complete.
  uint64_t BeginRecord();
  // Called on the stream's worker when it reaches the recorded point.
  void Complete(uint64_t generation);
  // The generation a Wait issued now must reach (0: never recorded, nothing to wait for).
  uint64_t RecordedGeneration() const;
  // Blocks the calling (worker) thread until `generation` is complete.
  void WaitFor(uint64_t generation) const;

 private:
  const bool enable_timing_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
  std::chrono::steady_clock::time_point completed_at_{};
};

}  // namespace tierflow

// A stream of the emulated CPU accelerator: an ordered queue of work run by
// its own thread, so work on different streams really overlaps in time.
//
// Errors: the first failing item becomes the stream's sticky error; later
// copies and callbacks are skipped (their results would be garbage), while
// event records and waits still run so other streams never deadlock on us.
//
// On the simulated accelerator (the device has a SimProfile) kernels are not
// run: each takes its roofline time (device/sim/sim_timing.h) as a timed
// wait that burns no CPU; copies and memsets do their work and then wait out
// the rest of their modelled time. The stream keeps a virtual clock, so
// back-to-back work costs the sum of its modelled times even when the OS
// wakes the thread late: an item starts when the one before it ended in the
// model, or when it was enqueued if the stream was idle.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tierflow/device.h"

namespace tierflow {

class CpuDevice;

class CpuStream : public Stream {
 public:
  CpuStream(CpuDevice* device, std::string name);
  ~CpuStream() override;

  const std::string& name() const override { return name_; }
  DeviceKind device_kind() const override;
  Status CopyHostToDevice(void* dst_device, const void* src_host, size_t num_bytes) override;
  Status CopyDeviceToHost(void* dst_host, const void* src_device, size_t num_bytes) override;
  Status CopyDeviceToDevice(void* dst_device, const void* src_device, size_t num_bytes) override;
  Status Memset(void* dst_device, int value, size_t num_bytes) override;
  Status Record(Event& event) override;
  Status Wait(const Event& event) override;
  Status HostCallback(std::function<Status()> fn) override;
  Status Launch(Kernel kernel) override;
  Status Synchronize() override;
  void* native_handle() const override { return nullptr; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Item {
    std::function<Status()> fn;  // may be empty for a simulated kernel
    bool runs_after_error;       // event records and waits: keep other streams moving
    double sim_seconds;          // < 0: untimed (runs as fast as it runs)
    Clock::time_point enqueued_at;
  };
  Status SimCopyDeviceToDevice(void* dst, const void* src, size_t n);
  Status Enqueue(std::function<Status()> fn, bool runs_after_error = false,
                 double sim_seconds = -1);
  // Runs one item, then (timed items) waits until its modelled end.
  Status RunItem(Item& item);
  void WorkerLoop();

  CpuDevice* const device_;
  const std::string name_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<Item> queue_;
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  Status sticky_error_;
  Clock::time_point sim_busy_until_{};  // worker thread only: the modelled end of the last item
  std::thread worker_;                  // last: starts after every field above exists
};

}  // namespace tierflow

// A stream of the emulated CPU accelerator: an ordered queue of work run by
// its own thread, so work on different streams really overlaps in time.
//
// Errors: the first failing item becomes the stream's sticky error; later
// copies and callbacks are skipped (their results would be garbage), while
// event records and waits still run so other streams never deadlock on us.
#pragma once

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
  DeviceKind device_kind() const override { return DeviceKind::kCpu; }
  Status CopyHostToDevice(void* dst_device, const void* src_host, size_t num_bytes) override;
  Status CopyDeviceToHost(void* dst_host, const void* src_device, size_t num_bytes) override;
  Status CopyDeviceToDevice(void* dst_device, const void* src_device, size_t num_bytes) override;
  Status Memset(void* dst_device, int value, size_t num_bytes) override;
  Status Record(Event& event) override;
  Status Wait(const Event& event) override;
  Status HostCallback(std::function<Status()> fn) override;
  Status Synchronize() override;
  void* native_handle() const override { return nullptr; }

 private:
  struct Item {
    std::function<Status()> fn;
    bool runs_after_error;  // event records and waits: keep other streams moving
  };
  Status Enqueue(std::function<Status()> fn, bool runs_after_error = false);
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
  std::thread worker_;  // last: starts after every field above exists
};

}  // namespace tierflow

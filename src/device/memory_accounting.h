// Byte accounting of one memory tier: in use, peak, capacity, with a clear
// out-of-memory error. Shared by the CPU and CUDA devices. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow {

class MemoryAccounting {
 public:
  // `tier_name` appears in errors ("device memory (cpu, emulated)");
  // `advice` says what the user can do ("raise --device-memory ...").
  MemoryAccounting(std::string tier_name, uint64_t capacity_bytes, std::string advice)
      : tier_name_(std::move(tier_name)), advice_(std::move(advice)) {
    stats_.capacity_bytes = capacity_bytes;
  }

  // Reserves num_bytes or returns OutOfMemory naming the request, use and capacity.
  Status Reserve(uint64_t num_bytes, std::string_view what);
  void Release(uint64_t num_bytes);
  void ResetPeak();
  MemoryStats Stats() const;

 private:
  std::string tier_name_;
  std::string advice_;
  mutable std::mutex mu_;
  MemoryStats stats_;
};

}  // namespace tierflow

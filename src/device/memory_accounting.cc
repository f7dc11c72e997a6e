// Byte accounting of one memory tier.
#include "device/memory_accounting.h"

#include "common/units.h"

namespace tierflow {

Status MemoryAccounting::Reserve(uint64_t num_bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.capacity_bytes != 0 && num_bytes > stats_.capacity_bytes - stats_.in_use_bytes) {
    std::string msg = tier_name_ + " is full: asked for " + FormatBytes(num_bytes);
    if (!what.empty()) msg += " for " + std::string(what);
    msg += " with " + FormatBytes(stats_.in_use_bytes) + " in use of " +
           FormatBytes(stats_.capacity_bytes) + " capacity";
    if (!advice_.empty()) msg += "; " + advice_;
    return OutOfMemoryError(std::move(msg));
  }
  stats_.in_use_bytes += num_bytes;
  stats_.num_allocations += 1;
  if (stats_.in_use_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.in_use_bytes;
  return Status::Ok();
}

void MemoryAccounting::Release(uint64_t num_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.in_use_bytes -= num_bytes;
  stats_.num_allocations -= 1;
}

void MemoryAccounting::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.in_use_bytes;
}

MemoryStats MemoryAccounting::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tierflow

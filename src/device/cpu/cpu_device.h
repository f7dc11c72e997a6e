// The emulated accelerator: device memory is host memory behind a capacity
// limit, streams are worker threads, kernels are Eigen/oneTBB code enqueued
// as host callbacks.
//
// Every device allocation is a separate aligned host allocation (not a
// sub-allocated arena) so ASan sees each buffer's bounds; the device keeps a
// registry of live allocations and rejects copies that touch memory outside
// them, which on a GPU would be an illegal address.
//
// With a SimProfile it is the simulated accelerator (DeviceKind::kSim): the
// same accounting, registry and stream semantics, but its streams take the
// profile's time for kernels and copies (see CpuStream), and device memory is
// reserved address space (zero pages, MAP_NORESERVE) that costs host memory
// only where a copy or memset touches it: kernels never run, so a 0.5 B
// model's activations cost nothing, and every value read back is finite.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "device/memory_accounting.h"
#include "device/sim/sim_written_ranges.h"
#include "tierflow/device.h"

namespace tierflow {

class CpuStream;

class CpuDevice : public Device {
 public:
  static constexpr uint64_t kDefaultCapacityBytes = 2ull << 30;

  // REQUIRES: `sim`, when given, passed ValidateSimProfile.
  explicit CpuDevice(uint64_t capacity_bytes, std::optional<SimProfile> sim = std::nullopt);
  ~CpuDevice() override;

  DeviceKind kind() const override { return sim_ ? DeviceKind::kSim : DeviceKind::kCpu; }
  // The simulated GPU, or nullptr for the plain CPU device.
  const SimProfile* sim() const { return sim_ ? &*sim_ : nullptr; }
  const SimProfile* sim_profile() const override { return sim(); }
  std::string description() const override;

  StatusOr<DeviceBuffer> Allocate(size_t num_bytes, std::string_view what) override;
  StatusOr<PinnedBuffer> AllocatePinned(size_t num_bytes, std::string_view what) override;
  MemoryStats DeviceMemory() const override { return device_memory_.Stats(); }
  MemoryStats PinnedMemory() const override { return pinned_memory_.Stats(); }
  void ResetPeaks() override;

  StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) override;
  StatusOr<std::unique_ptr<Event>> CreateEvent(bool enable_timing) override;
  Status Synchronize() override;

  // OK when [ptr, ptr+num_bytes) lies inside one live device allocation.
  Status CheckDeviceRange(const void* ptr, size_t num_bytes, std::string_view what) const;

  // Sim only: which device bytes may be non-zero (memsets to zero skip the rest).
  SimWrittenRanges& sim_written() { return sim_written_; }

  // Streams register themselves so Device::Synchronize can reach them.
  void Unregister(CpuStream* stream);

 protected:
  void Free(void* ptr, size_t num_bytes) override;
  void FreePinned(void* ptr, size_t num_bytes) override;

 private:
  const std::optional<SimProfile> sim_;
  MemoryAccounting device_memory_;
  MemoryAccounting pinned_memory_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> live_;  // device allocation start -> bytes
  std::set<CpuStream*> streams_;
  SimWrittenRanges sim_written_;
};

}  // namespace tierflow

// AlignedBuffer: page-aligned host memory for O_DIRECT I/O (tests, benches,
// headers). The engine's real buffers come from Device::AllocatePinned,
// which gives the same 4096-byte alignment.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_memory.h"
#include "tierflow/status.h"

namespace tierflow::offload {

// The alignment O_DIRECT needs for buffers, offsets and lengths here.
inline constexpr size_t kDirectIoAlignment = 4096;

constexpr uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Owns `num_bytes` (rounded up to 4096) of zeroed, 4096-aligned memory: a
// common/host_memory.h block whose size is a whole number of O_DIRECT units.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Returns OutOfMemory when the allocation fails.
  static StatusOr<AlignedBuffer> Allocate(size_t num_bytes);

  uint8_t* data() const { return pages_.as<uint8_t>(); }
  size_t num_bytes() const { return pages_.num_bytes(); }

 private:
  HostPages pages_;
};

}  // namespace tierflow::offload

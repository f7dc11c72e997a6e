// AlignedBuffer: page-aligned host memory for O_DIRECT I/O (tests, benches,
// headers). The engine's real buffers come from Device::AllocatePinned,
// which gives the same 4096-byte alignment.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tierflow/status.h"

namespace tierflow::offload {

// The alignment O_DIRECT needs for buffers, offsets and lengths here.
inline constexpr size_t kDirectIoAlignment = 4096;

constexpr uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Owns `num_bytes` (rounded up to 4096) of zeroed, 4096-aligned memory.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Returns OutOfMemory when the allocation fails.
  static StatusOr<AlignedBuffer> Allocate(size_t num_bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept { *this = static_cast<AlignedBuffer&&>(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  uint8_t* data() const { return data_; }
  size_t num_bytes() const { return num_bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t num_bytes_ = 0;
};

}  // namespace tierflow::offload

// Page-aligned allocation through common/host_memory.h (huge pages for large
// I/O blocks), zero-filled so that no uninitialised bytes ever reach a file.
#include "offload/aligned_buffer.h"

#include <string>

#include "common/host_memory.h"
#include "common/units.h"

namespace tierflow::offload {

StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t num_bytes) {
  size_t rounded = RoundUp(num_bytes == 0 ? 1 : num_bytes, kDirectIoAlignment);
  void* p = AllocateHostPages(rounded);
  if (p == nullptr) {
    return OutOfMemoryError("aligned host buffer of " + FormatBytes(rounded) +
                            ": allocation failed; lower the size");
  }
  AlignedBuffer b;
  b.data_ = static_cast<uint8_t*>(p);
  b.num_bytes_ = rounded;
  return b;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    FreeHostPages(data_, num_bytes_);
    data_ = other.data_;
    num_bytes_ = other.num_bytes_;
    other.data_ = nullptr;
    other.num_bytes_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { FreeHostPages(data_, num_bytes_); }

}  // namespace tierflow::offload

// Page-aligned allocation through common/host_memory.h (huge pages for large
// I/O blocks), zero-filled so that no uninitialised bytes ever reach a file.
#include "offload/aligned_buffer.h"

#include <string>
#include <utility>

#include "common/units.h"

namespace tierflow::offload {

StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t num_bytes) {
  const size_t rounded = RoundUp(num_bytes == 0 ? 1 : num_bytes, kDirectIoAlignment);
  StatusOr<HostPages> pages = HostPages::Allocate(rounded, "an aligned I/O buffer");
  if (!pages.ok()) {
    return OutOfMemoryError("aligned host buffer of " + FormatBytes(rounded) +
                            ": allocation failed; lower the size");
  }
  AlignedBuffer b;
  b.pages_ = std::move(*pages);
  return b;
}

}  // namespace tierflow::offload

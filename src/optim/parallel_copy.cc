// ParallelCopy: memcpy over oneTBB.
#include "optim/parallel_copy.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstring>

namespace tierflow {

void ParallelCopy(void* dst, const void* src, size_t num_bytes) {
  constexpr size_t kPiece = size_t{1} << 20;
  if (num_bytes <= kPiece) {
    if (num_bytes > 0) std::memcpy(dst, src, num_bytes);
    return;
  }
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t pieces = (num_bytes + kPiece - 1) / kPiece;
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, pieces, 1), [&](const tbb::blocked_range<size_t>& r) {
        const size_t begin = r.begin() * kPiece;
        const size_t end = r.end() * kPiece < num_bytes ? r.end() * kPiece : num_bytes;
        std::memcpy(d + begin, s + begin, end - begin);
      });
}

}  // namespace tierflow

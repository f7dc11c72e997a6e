#include "common/streaming_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace tierflow {
namespace {

// Every size class (below the threshold, at it, above with a ragged tail)
// at every offset of source and destination within a line: the bytes are
// memcpy's/memset's, and nothing outside [dst, dst + n) changes.
TEST(StreamingCopyTest, CopiesExactlyTheRangeAtAnyAlignment) {
  const size_t sizes[] = {0,
                          1,
                          63,
                          4096,
                          kStreamingCopyMinBytes - 1,
                          kStreamingCopyMinBytes,
                          kStreamingCopyMinBytes + 77};
  const size_t guard = 128;
  std::vector<unsigned char> src(kStreamingCopyMinBytes + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  std::vector<unsigned char> dst(kStreamingCopyMinBytes + 256 + 2 * guard);
  for (size_t n : sizes) {
    for (size_t src_off : {size_t{0}, size_t{3}, size_t{17}}) {
      for (size_t dst_off : {size_t{0}, size_t{1}, size_t{40}, size_t{63}}) {
        std::fill(dst.begin(), dst.end(), 0xAB);
        unsigned char* d = dst.data() + guard + dst_off;
        StreamingCopy(d, src.data() + src_off, n);
        ASSERT_EQ(std::memcmp(d, src.data() + src_off, n), 0)
            << n << " " << src_off << " " << dst_off;
        for (unsigned char* p = dst.data(); p < d; ++p) ASSERT_EQ(*p, 0xAB) << n;
        for (unsigned char* p = d + n; p < dst.data() + dst.size(); ++p) ASSERT_EQ(*p, 0xAB) << n;

        std::fill(dst.begin(), dst.end(), 0xAB);
        StreamingZero(d, n);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], 0) << n << " " << i;
        for (unsigned char* p = dst.data(); p < d; ++p) ASSERT_EQ(*p, 0xAB) << n;
        for (unsigned char* p = d + n; p < dst.data() + dst.size(); ++p) ASSERT_EQ(*p, 0xAB) << n;
      }
    }
  }
}

}  // namespace
}  // namespace tierflow

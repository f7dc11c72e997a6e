#include "optim/parallel_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace tierflow {
namespace {

// Every byte lands where memcpy would put it, around the 1 MiB pieces and
// for ragged sizes, and nothing past the end is touched.
TEST(ParallelCopy, CopiesExactlyTheRange) {
  constexpr size_t kMiB = size_t{1} << 20;
  for (size_t n : {size_t{0}, size_t{1}, kMiB - 1, kMiB, kMiB + 1, 5 * kMiB + 4093}) {
    std::vector<uint8_t> src(n), dst(n + 64, 0xAB);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + i / 4099);
    ParallelCopy(dst.data(), src.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(dst[i], src[i]) << "n=" << n << " i=" << i;
    }
    for (size_t i = n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "n=" << n;
  }
}

}  // namespace
}  // namespace tierflow

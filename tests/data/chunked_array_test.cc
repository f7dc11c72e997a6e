// ChunkedArray: every element where it was put across the doubling chunks
// and the full-size ones after them, MemoryBytesAfter equal to what the
// appends then hold, and Freeze trimming to the elements.
#include "data/chunked_array.h"

#include <algorithm>
#include <cstdint>

#include <gtest/gtest.h>

namespace tierflow {
namespace {

using Array = ChunkedArray<uint64_t>;

TEST(ChunkedArray, ElementsStayWhereTheyWerePutAcrossEveryKindOfChunk) {
  Array a;
  const size_t n = Array::kGrowingElements + 2 * Array::kMaxChunk + 77;
  for (size_t i = 0; i < n; ++i) a.push_back(i * 2654435761u);
  ASSERT_EQ(a.size(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], i * 2654435761u) << i;
  a.back() = 5;
  EXPECT_EQ(a[n - 1], 5u);
}

TEST(ChunkedArray, MemoryBytesAfterIsWhatTheAppendsHold) {
  Array a;
  EXPECT_EQ(a.MemoryBytes(), 0u);
  size_t added = 0;
  // Steps that land inside chunks, on their ends and across several.
  for (size_t step :
       {size_t{1}, size_t{1023}, size_t{1}, size_t{5000}, size_t{3} << 20, size_t{17}}) {
    const uint64_t predicted = a.MemoryBytesAfter(step);
    for (size_t i = 0; i < step; ++i) a.push_back(added + i);
    added += step;
    EXPECT_EQ(a.MemoryBytes(), predicted) << "after " << added;
    // Nothing held beyond the elements but the chunk being filled.
    EXPECT_LE(a.MemoryBytes(),
              (added + std::max(added, Array::kMaxChunk)) * sizeof(uint64_t) + 64 * sizeof(void*));
  }
  a.Freeze();
  EXPECT_LE(a.MemoryBytes(), added * sizeof(uint64_t) + 64 * sizeof(void*));
  EXPECT_GE(a.MemoryBytes(), added * sizeof(uint64_t));
  for (size_t i = 0; i < added; i += 997) ASSERT_EQ(a[i], i);
  EXPECT_EQ(a[added - 1], added - 1);
}

}  // namespace
}  // namespace tierflow

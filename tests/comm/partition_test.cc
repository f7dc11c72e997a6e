// Partition: aligned parts that cover the range exactly once.
#include "comm/partition.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tierflow::comm {
namespace {

void ExpectCovers(const Partition& p, size_t count, size_t align) {
  EXPECT_EQ(p.begin(0), 0u);
  EXPECT_EQ(p.total(), count);
  for (int r = 0; r < p.world(); ++r) {
    EXPECT_LE(p.begin(r), p.end(r));
    if (r + 1 < p.world()) {
      EXPECT_EQ(p.end(r), p.begin(r + 1));
      // Every boundary inside the range is aligned.
      if (p.end(r) < count) {
        EXPECT_EQ(p.end(r) % align, 0u) << "rank " << r;
      }
    }
  }
}

TEST(Partition, EvenCutsWholeAlignedBlocks) {
  for (size_t count : {0ul, 1ul, 15ul, 16ul, 17ul, 1000ul, 4096ul, 65537ul}) {
    for (int world : {1, 2, 3, 4, 7}) {
      for (size_t align : {1ul, 16ul, 4096ul}) {
        auto p = Partition::Even(count, world, align);
        ASSERT_TRUE(p.ok()) << p.status().message();
        EXPECT_EQ(p->world(), world);
        ExpectCovers(*p, count, align);
        // No part exceeds the ceiling share of blocks.
        const size_t blocks = (count + align - 1) / align;
        const size_t per = (blocks + world - 1) / world * align;
        EXPECT_LE(p->max_size(), per);
      }
    }
  }
  auto p = Partition::Even(40, 3, 16);  // 3 blocks: 16 / 16 / 8
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(0), 16u);
  EXPECT_EQ(p->size(1), 16u);
  EXPECT_EQ(p->size(2), 8u);
  // An alignment past the range: one block, all on rank 0, no overflow.
  p = Partition::Even(1000, 4, SIZE_MAX / 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(0), 1000u);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(p->size(r), 0u) << r;
  p = Partition::Even(20, 4, 16);  // 2 blocks for 4 ranks: the last two are empty
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(0), 16u);
  EXPECT_EQ(p->size(1), 4u);
  EXPECT_EQ(p->size(2), 0u);
  EXPECT_EQ(p->size(3), 0u);
}

TEST(Partition, RefusesImpossibleShapes) {
  EXPECT_FALSE(Partition::Even(10, 0, 1).ok());
  EXPECT_FALSE(Partition::Even(10, -1, 1).ok());
  EXPECT_FALSE(Partition::Even(10, 2, 0).ok());
  EXPECT_FALSE(Partition::FromBounds({}).ok());
  EXPECT_FALSE(Partition::FromBounds({0}).ok());
  EXPECT_FALSE(Partition::FromBounds({1, 2}).ok());
  auto bad = Partition::FromBounds({0, 5, 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("boundary 2 (3) is below the one before (5)"),
            std::string::npos);
  auto good = Partition::FromBounds({0, 5, 5, 9});
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->world(), 3);
  EXPECT_EQ(good->size(1), 0u);
  EXPECT_EQ(good->max_size(), 5u);
}

}  // namespace
}  // namespace tierflow::comm

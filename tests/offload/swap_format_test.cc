// Swap-file header and block table: round trips, and every corruption the
// decoder must catch (bit flips anywhere, truncation, a newer version).
#include "offload/swap_format.h"

#include <cstring>

#include <gtest/gtest.h>

#include "offload/aligned_buffer.h"

namespace tierflow::offload {
namespace {

SwapFileHeader SampleHeader() {
  SwapFileHeader h;
  h.run_id = "run-test-1";
  h.dir_index = 1;
  h.num_dirs = 2;
  h.block_size_bytes = 1 << 20;
  h.tensors.push_back({"layers.0.mlp.up/exp_avg", DType::kF32, 5u << 20, 5, 0, 0});
  h.tensors.push_back({"layers.0.mlp.up/exp_avg_sq", DType::kF32, (3u << 20) + 100, 4, 1, 2});
  h.num_logical_blocks = 2 + 2;  // tensor 0: blocks 1,3; tensor 1: blocks 0,2
  h.num_physical_blocks = h.num_logical_blocks + 8;
  h.block_table_copy_num_bytes = BlockTableCopySize(h.num_logical_blocks);
  h.block_table_offset_bytes = 4096;
  h.data_offset_bytes = 1 << 20;
  return h;
}

TEST(SwapFormat, BlocksInDirectoryCoversEveryBlockOnce) {
  for (uint32_t dirs = 1; dirs <= 4; ++dirs) {
    for (uint64_t blocks = 0; blocks <= 9; ++blocks) {
      for (uint32_t start = 0; start < dirs; ++start) {
        uint64_t total = 0;
        for (uint32_t d = 0; d < dirs; ++d) {
          uint64_t expected = 0;
          for (uint64_t k = 0; k < blocks; ++k) expected += BlockDirectory(start, k, dirs) == d;
          EXPECT_EQ(BlocksInDirectory(blocks, start, d, dirs), expected);
          total += expected;
        }
        EXPECT_EQ(total, blocks);
      }
    }
  }
}

TEST(SwapFormat, HeaderRoundTrips) {
  SwapFileHeader h = SampleHeader();
  std::vector<uint8_t> bytes = EncodeSwapHeader(h);
  ASSERT_EQ(bytes.size() % 4096, 0u);
  StatusOr<uint64_t> size = SwapHeaderSize(bytes, "f");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, bytes.size());
  StatusOr<SwapFileHeader> d = DecodeSwapHeader(bytes, "f");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->run_id, h.run_id);
  EXPECT_EQ(d->dir_index, 1u);
  EXPECT_EQ(d->num_physical_blocks, h.num_physical_blocks);
  ASSERT_EQ(d->tensors.size(), 2u);
  EXPECT_EQ(d->tensors[1].name, "layers.0.mlp.up/exp_avg_sq");
  EXPECT_EQ(d->tensors[1].num_bytes, (3u << 20) + 100);
  EXPECT_EQ(d->tensors[1].first_local_block, 2u);
}

TEST(SwapFormat, EveryBitFlipInTheHeaderIsDataLossNamingThePath) {
  std::vector<uint8_t> good = EncodeSwapHeader(SampleHeader());
  // Bits of the 24-byte prefix and the payload (the zero padding is not covered).
  size_t covered = 24 + 200;
  for (size_t bit = 0; bit < covered * 8; ++bit) {
    std::vector<uint8_t> bad = good;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    StatusOr<SwapFileHeader> d = DecodeSwapHeader(bad, "/nvme/x/state-0.swap");
    if (d.ok()) {
      // Only a flip in the padding past the payload may go unnoticed.
      uint32_t payload = 0;
      std::memcpy(&payload, good.data() + 16, 4);
      ASSERT_GE(bit / 8, 24 + payload) << "bit " << bit << " went unnoticed";
      continue;
    }
    EXPECT_TRUE(d.status().code() == StatusCode::kDataLoss ||
                d.status().code() == StatusCode::kUnimplemented)
        << d.status().ToString();
    EXPECT_NE(d.status().message().find("/nvme/x/state-0.swap"), std::string::npos);
  }
}

TEST(SwapFormat, TruncatedHeaderIsDataLoss) {
  std::vector<uint8_t> good = EncodeSwapHeader(SampleHeader());
  StatusOr<SwapFileHeader> d = DecodeSwapHeader(std::span<const uint8_t>(good.data(), 100), "f");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> zeros(4096, 0);
  EXPECT_EQ(SwapHeaderSize(zeros, "f").status().code(), StatusCode::kDataLoss);
}

TEST(SwapFormat, NewerVersionIsUnimplementedNotGarbage) {
  SwapFileHeader h = SampleHeader();
  h.version = kSwapFormatVersion + 1;
  StatusOr<SwapFileHeader> d = DecodeSwapHeader(EncodeSwapHeader(h), "f");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(d.status().message().find("upgrade"), std::string::npos);
}

TEST(SwapFormat, BlockTableRoundTripsAndDetectsCorruption) {
  BlockTable t;
  t.sequence = 7;
  t.physical = {3, kUnmappedBlock, 0, 9};
  t.crc = {0xDEADBEEF, 0, 1, 2};
  std::vector<uint8_t> bytes(BlockTableCopySize(4));
  EncodeBlockTable(t, bytes);
  StatusOr<BlockTable> d = DecodeBlockTable(bytes, 4, "f", 4096);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->sequence, 7u);
  EXPECT_EQ(d->physical, t.physical);
  EXPECT_EQ(d->crc, t.crc);
  EXPECT_EQ(DecodeBlockTable(bytes, 5, "f", 4096).status().code(), StatusCode::kDataLoss);
  for (size_t byte : {0u, 9u, 17u, 24u, 33u, 60u}) {
    std::vector<uint8_t> bad = bytes;
    bad[byte] ^= 0x04;
    StatusOr<BlockTable> b = DecodeBlockTable(bad, 4, "/d/state-0.swap", 4096);
    ASSERT_FALSE(b.ok()) << "byte " << byte;
    EXPECT_EQ(b.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(b.status().message().find("/d/state-0.swap"), std::string::npos);
    EXPECT_NE(b.status().message().find("offset 4096"), std::string::npos);
  }
}

}  // namespace
}  // namespace tierflow::offload

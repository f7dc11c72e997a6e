// CRC32C: known vectors, and the SSE4.2 path agrees with the portable one at
// every length and alignment (so files written on one CPU read on another).
#include "offload/crc32c.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/require.h"

namespace tierflow::offload {
namespace {

TEST(Crc32c, KnownVectors) {
  const char* check = "123456789";
  EXPECT_EQ(Crc32cPortable(0, check, 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, check, 9), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and ascending.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32cPortable(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32cPortable(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32cPortable(0, inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Crc32cPortable(0, nullptr, 0), 0u);
}

TEST(Crc32c, HardwareMatchesPortableAtEveryLengthAndAlignment) {
  if (!Crc32cHardwareAvailable()) TIERFLOW_SKIP_WITHOUT("sse42") << "this CPU has no SSE4.2";
  EXPECT_EQ(Crc32cHardware(0, "123456789", 9), 0xE3069283u);
  std::vector<uint8_t> data(4096 + 64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len = 0; len < 300; ++len) {
      ASSERT_EQ(Crc32cHardware(0, data.data() + offset, len),
                Crc32cPortable(0, data.data() + offset, len))
          << "offset " << offset << " len " << len;
    }
  }
  EXPECT_EQ(Crc32cHardware(0x1234, data.data(), 4096), Crc32cPortable(0x1234, data.data(), 4096));
}

TEST(Crc32c, InterleavedStreamsMatchPortableOnLongBuffers) {
  if (!Crc32cHardwareAvailable()) TIERFLOW_SKIP_WITHOUT("sse42") << "this CPU has no SSE4.2";
  // Around multiples of the 3 x 4 KiB interleave, and a 1 MiB block.
  std::vector<uint8_t> data((1 << 20) + 8192);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  for (size_t len :
       {12287ul, 12288ul, 12289ul, 24576ul + 7, 36864ul * 3 + 100, 1ul << 20, (1ul << 20) + 4100}) {
    for (size_t offset = 0; offset < 4; ++offset) {
      ASSERT_EQ(Crc32cHardware(0xABCDu, data.data() + offset, len),
                Crc32cPortable(0xABCDu, data.data() + offset, len))
          << "offset " << offset << " len " << len;
    }
  }
}

TEST(Crc32c, ExtendingEqualsOneShot) {
  std::string s = "the quick brown fox jumps over the lazy dog, twice over and again";
  for (size_t split = 0; split <= s.size(); ++split) {
    uint32_t a = Crc32c(0, s.data(), split);
    EXPECT_EQ(Crc32c(a, s.data() + split, s.size() - split), Crc32c(0, s.data(), s.size()));
    uint32_t p = Crc32cPortable(0, s.data(), split);
    EXPECT_EQ(Crc32cPortable(p, s.data() + split, s.size() - split),
              Crc32cPortable(0, s.data(), s.size()));
  }
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
  std::vector<uint8_t> data(512);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  uint32_t good = Crc32c(0, data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_NE(Crc32c(0, data.data(), data.size()), good) << "bit " << bit;
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace tierflow::offload

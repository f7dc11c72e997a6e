// Fuzz entry points for the swap file's header and block table.
//
// Both are CRC32C-protected, so random bytes almost never get past the
// checksum. Each input is therefore decoded twice: as it is, and with its
// checksum recomputed, which lets the fuzzer reach the field checks a torn or
// hand-crafted file with a valid checksum would reach.
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "offload/crc32c.h"
#include "offload/swap_format.h"

namespace tierflow::fuzz {
namespace {

using offload::BlockTable;
using offload::SwapFileHeader;

constexpr size_t kHeaderPrefixBytes = 24;  // magic, version, total, payload size, crc
constexpr size_t kTablePrefixBytes = 32;   // magic, sequence, count, crc, pad

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The header checksum as swap_format.cc computes it, stored in place.
void FixHeaderCrc(std::vector<uint8_t>& b) {
  if (b.size() < kHeaderPrefixBytes) return;
  uint32_t payload = 0;
  std::memcpy(&payload, b.data() + 16, 4);
  if (payload > b.size() - kHeaderPrefixBytes) return;
  uint32_t crc = offload::Crc32c(0, b.data(), 20);
  crc = offload::Crc32c(crc, b.data() + kHeaderPrefixBytes, payload);
  std::memcpy(b.data() + 20, &crc, 4);
}

void FixTableCrc(std::vector<uint8_t>& b, uint64_t n) {
  if (b.size() < kTablePrefixBytes + 8 * n) return;
  uint32_t crc = offload::Crc32c(0, b.data(), 24);
  crc = offload::Crc32c(crc, b.data() + kTablePrefixBytes, 8 * n);
  std::memcpy(b.data() + 24, &crc, 4);
}

bool SameHeader(const SwapFileHeader& a, const SwapFileHeader& b) {
  if (a.version != b.version || a.run_id != b.run_id || a.dir_index != b.dir_index ||
      a.num_dirs != b.num_dirs || a.block_size_bytes != b.block_size_bytes ||
      a.num_logical_blocks != b.num_logical_blocks ||
      a.num_physical_blocks != b.num_physical_blocks ||
      a.block_table_offset_bytes != b.block_table_offset_bytes ||
      a.block_table_copy_num_bytes != b.block_table_copy_num_bytes ||
      a.data_offset_bytes != b.data_offset_bytes || a.tensors.size() != b.tensors.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& x = a.tensors[i];
    const auto& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.num_bytes != y.num_bytes ||
        x.num_blocks != y.num_blocks || x.start_dir != y.start_dir ||
        x.first_local_block != y.first_local_block) {
      return false;
    }
  }
  return true;
}

// What a header the decoder accepts promises its users (SwapSet indexes
// blocks and files with these values), computed without wrap-around.
void CheckAcceptedHeader(const SwapFileHeader& h) {
  using u128 = unsigned __int128;
  FUZZ_CHECK(h.version <= offload::kSwapFormatVersion);
  FUZZ_CHECK(h.num_dirs > 0 && h.dir_index < h.num_dirs);
  FUZZ_CHECK(h.block_size_bytes > 0 && h.block_size_bytes % 4096 == 0);
  FUZZ_CHECK(h.num_logical_blocks <= h.num_physical_blocks);
  FUZZ_CHECK(h.num_physical_blocks < offload::kUnmappedBlock);
  FUZZ_CHECK(h.block_table_copy_num_bytes == offload::BlockTableCopySize(h.num_logical_blocks));
  FUZZ_CHECK(u128{h.block_table_offset_bytes} + 2 * u128{h.block_table_copy_num_bytes} <=
             u128{h.data_offset_bytes});
  for (const auto& t : h.tensors) {
    FUZZ_CHECK(!t.name.empty());
    FUZZ_CHECK(t.start_dir < h.num_dirs);
    const uint64_t blocks =
        t.num_bytes / h.block_size_bytes + (t.num_bytes % h.block_size_bytes != 0 ? 1 : 0);
    FUZZ_CHECK(t.num_blocks == blocks);
    const uint64_t here =
        offload::BlocksInDirectory(t.num_blocks, t.start_dir, h.dir_index, h.num_dirs);
    FUZZ_CHECK(u128{t.first_local_block} + u128{here} <= u128{h.num_logical_blocks});
  }
}

void DecodeHeaderOnce(std::span<const uint8_t> bytes) {
  StatusOr<uint64_t> size = offload::SwapHeaderSize(bytes, "fuzz.swap");
  StatusOr<SwapFileHeader> h = offload::DecodeSwapHeader(bytes, "fuzz.swap");
  if (!h.ok()) {
    FUZZ_CHECK(!h.status().message().empty());
    return;
  }
  FUZZ_CHECK(size.ok() && *size <= bytes.size() && *size % 4096 == 0);
  CheckAcceptedHeader(*h);
  // Accepted headers re-encode to something that decodes to the same value.
  const std::vector<uint8_t> encoded = offload::EncodeSwapHeader(*h);
  StatusOr<SwapFileHeader> again = offload::DecodeSwapHeader(encoded, "fuzz.swap (re-encoded)");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(SameHeader(*h, *again));
}

void DecodeTableOnce(std::span<const uint8_t> bytes, uint64_t n) {
  StatusOr<BlockTable> t = offload::DecodeBlockTable(bytes, n, "fuzz.swap", 4096);
  if (!t.ok()) {
    FUZZ_CHECK(!t.status().message().empty());
    return;
  }
  FUZZ_CHECK(t->physical.size() == n && t->crc.size() == n);
  std::vector<uint8_t> encoded(offload::BlockTableCopySize(n));
  offload::EncodeBlockTable(*t, encoded);
  StatusOr<BlockTable> again = offload::DecodeBlockTable(encoded, n, "fuzz.swap", 4096);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->sequence == t->sequence && again->physical == t->physical &&
             again->crc == t->crc);
}

}  // namespace

void FuzzSwapHeader(std::string_view data) {
  DecodeHeaderOnce(Bytes(data));
  std::vector<uint8_t> fixed(data.begin(), data.end());
  FixHeaderCrc(fixed);
  DecodeHeaderOnce(fixed);
}

void FuzzSwapBlockTable(std::string_view data) {
  if (data.empty()) return;
  const uint64_t n = static_cast<uint8_t>(data[0]);
  data.remove_prefix(1);
  DecodeTableOnce(Bytes(data), n);
  std::vector<uint8_t> fixed(data.begin(), data.end());
  FixTableCrc(fixed, n);
  DecodeTableOnce(fixed, n);
}

}  // namespace tierflow::fuzz

// The on-disk format of a swap file: one file per state directory (drive).
//
//   [header]          magic "TFSWAP\0\1", version, run id, geometry, the
//                     tensor table; CRC32C over all of it; padded to 4096
//   [block table x2]  two copies (A/B) of {sequence, per logical block: the
//                     physical block holding it and the CRC32C of its bytes};
//                     the newer valid copy wins, so a torn table write keeps
//                     the older one
//   [data]            physical blocks of block_size bytes, from data_offset
//
// A tensor is cut into blocks; block k of a tensor whose start directory is
// s lives in directory (s + k) % num_dirs, so tensors stripe over drives.
// Logical blocks are remapped on every write (write-to-new-block, then
// switch the map), so the previous copy survives a failed write.
// Integers are little-endian (the byte order of every host tierflow supports).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow::offload {

inline constexpr uint64_t kSwapHeaderMagic = 0x0100'5041'5753'4654ull;  // "TFSWAP\0\1"
inline constexpr uint64_t kBlockTableMagic = 0x4C42'5442'4B4C'4254ull;  // "TBLKBTBL"
inline constexpr uint32_t kSwapFormatVersion = 1;
inline constexpr uint32_t kUnmappedBlock = 0xFFFF'FFFFu;

struct SwapTensorEntry {
  std::string name;  // e.g. "layers.3.mlp.up/exp_avg"
  DType dtype = DType::kF32;
  uint64_t num_bytes = 0;
  uint64_t num_blocks = 0;  // ceil(num_bytes / block_size)
  uint32_t start_dir = 0;   // directory of the tensor's block 0
  // In this file: the logical block index of the tensor's first block here
  // (its blocks here are consecutive logical blocks).
  uint64_t first_local_block = 0;
};

struct SwapFileHeader {
  uint32_t version = kSwapFormatVersion;
  std::string run_id;
  uint32_t dir_index = 0;
  uint32_t num_dirs = 1;
  uint32_t block_size_bytes = 0;
  uint64_t num_logical_blocks = 0;          // blocks of tensor data in this file
  uint64_t num_physical_blocks = 0;         // logical + spare
  uint64_t block_table_offset_bytes = 0;    // copy A; copy B follows
  uint64_t block_table_copy_num_bytes = 0;  // each copy, 4096-aligned
  uint64_t data_offset_bytes = 0;
  std::vector<SwapTensorEntry> tensors;
};

// The header as bytes, padded to a multiple of 4096.
std::vector<uint8_t> EncodeSwapHeader(const SwapFileHeader& header);

// Bytes of the whole header given its first 4096 bytes (to know how much to
// read). Errors: DataLoss naming `path` when the prefix is not a header.
StatusOr<uint64_t> SwapHeaderSize(std::span<const uint8_t> prefix, std::string_view path);

// Parses and checks (magic, version, CRC32C, consistency) a header. Errors:
// DataLoss naming `path` and what is wrong; Unimplemented for a newer version.
StatusOr<SwapFileHeader> DecodeSwapHeader(std::span<const uint8_t> bytes, std::string_view path);

// Per logical block: where it lives and its checksum.
struct BlockTable {
  uint64_t sequence = 0;           // higher = newer
  std::vector<uint32_t> physical;  // kUnmappedBlock = never written
  std::vector<uint32_t> crc;       // CRC32C of the block's valid bytes
};

// Bytes of one block table copy for `num_logical_blocks`, 4096-aligned.
uint64_t BlockTableCopySize(uint64_t num_logical_blocks);

// `table` encoded into `out` (exactly BlockTableCopySize bytes).
void EncodeBlockTable(const BlockTable& table, std::span<uint8_t> out);

// Parses one copy. Errors: DataLoss naming `path` and `offset_bytes`.
StatusOr<BlockTable> DecodeBlockTable(std::span<const uint8_t> bytes, uint64_t num_logical_blocks,
                                      std::string_view path, uint64_t offset_bytes);

// The geometry shared by writer and reader: where block k of a tensor lives.
struct BlockLocation {
  uint32_t dir = 0;
  uint64_t local_block = 0;  // logical block index within that directory's file
};
inline uint32_t BlockDirectory(uint32_t start_dir, uint64_t block, uint32_t num_dirs) {
  return static_cast<uint32_t>((start_dir + block) % num_dirs);
}
// Blocks of a `num_blocks` tensor with start directory `start_dir` in `dir`.
uint64_t BlocksInDirectory(uint64_t num_blocks, uint32_t start_dir, uint32_t dir,
                           uint32_t num_dirs);

}  // namespace tierflow::offload

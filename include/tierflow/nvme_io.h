// How the NVMe state store drives its drive: the settings that `tierflow
// bench nvme --tune` chooses and writes into the hardware profile, that the
// start-up probe picks without one, and that DeepSpeed's `aio` keys set. One
// type from the profile to the io_uring rings, so every layer checks the same
// bounds (those of StateStore and IoEngine).
#pragma once

#include <cstdint>
#include <string>

#include "tierflow/status.h"

namespace tierflow {

struct NvmeIoSettings {
  // Bytes per I/O request, per CRC32C and per allocation block of the swap
  // files (DeepSpeed: aio.block_size). A multiple of 4096 from 4 KiB to 256 MiB.
  uint32_t block_size_bytes = 1u << 20;
  // Operations in flight per ring (aio.queue_depth). 1..4096.
  uint32_t queue_depth = 32;
  // io_uring rings, each with its own thread (aio.thread_count /
  // aio.intra_op_parallelism). 1..64.
  uint32_t num_rings = 1;

  bool operator==(const NvmeIoSettings&) const = default;
};

inline constexpr uint32_t kNvmeIoMinBlockBytes = 4096;
inline constexpr uint32_t kNvmeIoMaxBlockBytes = 256u << 20;
inline constexpr uint32_t kNvmeIoMaxQueueDepth = 4096;
inline constexpr uint32_t kNvmeIoMaxRings = 64;

// InvalidArgument naming `where` (e.g. "profile p.json: nvme_store") and
// the field when a setting is out of those bounds.
inline Status ValidateNvmeIoSettings(const NvmeIoSettings& s, const std::string& where) {
  if (s.block_size_bytes < kNvmeIoMinBlockBytes || s.block_size_bytes % 4096 != 0 ||
      s.block_size_bytes > kNvmeIoMaxBlockBytes) {
    return InvalidArgumentError(where + ".block_size_bytes is " +
                                std::to_string(s.block_size_bytes) +
                                "; it must be a multiple of 4096 from 4096 (4 KiB) to 268435456 "
                                "(256 MiB)");
  }
  if (s.queue_depth < 1 || s.queue_depth > kNvmeIoMaxQueueDepth) {
    return InvalidArgumentError(where + ".queue_depth is " + std::to_string(s.queue_depth) +
                                "; it must be 1..4096");
  }
  if (s.num_rings < 1 || s.num_rings > kNvmeIoMaxRings) {
    return InvalidArgumentError(where + ".num_rings is " + std::to_string(s.num_rings) +
                                "; it must be 1..64");
  }
  return Status::Ok();
}

// "16 MiB blocks, queue depth 8, 1 ring".
inline std::string DescribeNvmeIoSettings(const NvmeIoSettings& s) {
  const uint32_t b = s.block_size_bytes;
  std::string block =
      b % (1u << 20) == 0 ? std::to_string(b >> 20) + " MiB" : std::to_string(b >> 10) + " KiB";
  return block + " blocks, queue depth " + std::to_string(s.queue_depth) + ", " +
         std::to_string(s.num_rings) + (s.num_rings == 1 ? " ring" : " rings");
}

}  // namespace tierflow

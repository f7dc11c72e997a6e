// The engine's NVMe settings as a swap set's, and as a StateStore's options.
#include "engine/swap_store_options.h"

#include "offload/aligned_buffer.h"

namespace tierflow {

SwapSetConfig SwapSetOf(const EngineOptions& o) {
  return SwapSetConfig{.paths = o.nvme_paths,
                       .buffered = o.nvme_buffered,
                       .run_id = o.run_id,
                       .owner = o.swap_owner,
                       .io = o.nvme_io,
                       .backend_factory = o.nvme_backend_factory};
}

offload::StateStoreOptions SwapStoreOptions(const SwapSetConfig& set, uint64_t spare_bytes) {
  return offload::StateStoreOptions{
      .directories = set.paths,
      .run_id = set.run_id,
      .block_size_bytes = set.io.block_size_bytes,
      .io_mode = set.buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect,
      .queue_depth = set.io.queue_depth,
      .num_rings = set.io.num_rings,
      .spare_bytes_per_directory = offload::RoundUp(spare_bytes, uint64_t{set.io.block_size_bytes}),
      .owner = set.owner,
      .backend_factory = set.backend_factory};
}

}  // namespace tierflow

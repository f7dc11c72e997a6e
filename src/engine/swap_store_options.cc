// The engine's NVMe settings as a swap set's, and as a StateStore's options.
#include "engine/swap_store_options.h"

#include "offload/aligned_buffer.h"

namespace tierflow {

SwapSetConfig SwapSetOf(const EngineOptions& options) {
  SwapSetConfig set;
  set.paths = options.nvme_paths;
  set.buffered = options.nvme_buffered;
  set.run_id = options.run_id;
  set.owner = options.swap_owner;
  set.io = options.nvme_io;
  set.backend_factory = options.nvme_backend_factory;
  return set;
}

offload::StateStoreOptions SwapStoreOptions(const SwapSetConfig& set, uint64_t spare_bytes) {
  offload::StateStoreOptions so;
  so.directories = set.paths;
  so.run_id = set.run_id;
  so.owner = set.owner;
  so.block_size_bytes = set.io.block_size_bytes;
  so.queue_depth = set.io.queue_depth;
  so.num_rings = set.io.num_rings;
  so.io_mode = set.buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect;
  if (set.backend_factory) so.backend_factory = set.backend_factory;
  so.spare_bytes_per_directory = offload::RoundUp(spare_bytes, uint64_t{set.io.block_size_bytes});
  return so;
}

}  // namespace tierflow

// The engine's NVMe settings as a StateStore's options.
#include "engine/swap_store_options.h"

#include "offload/aligned_buffer.h"

namespace tierflow {

offload::StateStoreOptions SwapStoreOptions(const std::vector<std::string>& paths,
                                            const std::string& run_id, const std::string& owner,
                                            const NvmeIoSettings& io, bool buffered,
                                            const offload::IoBackendFactory& factory,
                                            uint64_t spare_bytes) {
  offload::StateStoreOptions so;
  so.directories = paths;
  so.run_id = run_id;
  so.owner = owner;
  so.block_size_bytes = io.block_size_bytes;
  so.queue_depth = io.queue_depth;
  so.num_rings = io.num_rings;
  so.io_mode = buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect;
  if (factory) so.backend_factory = factory;
  so.spare_bytes_per_directory = offload::RoundUp(spare_bytes, uint64_t{io.block_size_bytes});
  return so;
}

}  // namespace tierflow

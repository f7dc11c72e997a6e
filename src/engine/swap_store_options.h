// The StateStore options of one of the engine's swap sets: the optimizer
// state's (NvmeStateTier) or the streamed weights' (StreamedWeights). One
// mapping from the engine's NVMe settings to the store's, so the two sets
// never differ in how they choose their I/O mode or backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offload/state_store.h"
#include "tierflow/nvme_io.h"

namespace tierflow {

// `paths`: one directory per drive; `run_id` names the set ("" = generated);
// `owner`: its owner record ("" = none); `buffered`: page-cache I/O instead
// of O_DIRECT; `factory`: the ring backends (empty: io_uring). Room for
// `spare_bytes` of rewrites per directory, rounded up to whole blocks.
offload::StateStoreOptions SwapStoreOptions(const std::vector<std::string>& paths,
                                            const std::string& run_id, const std::string& owner,
                                            const NvmeIoSettings& io, bool buffered,
                                            const offload::IoBackendFactory& factory,
                                            uint64_t spare_bytes);

}  // namespace tierflow

// Where and how one of the engine's swap sets lives: the optimizer state's
// (NvmeStateTier) or the streamed weights' (StreamedWeights). The engine's
// NVMe settings are named once here (SwapSetConfig), taken from
// EngineOptions in one place (SwapSetOf), and mapped to a StateStore's
// options in one place (SwapStoreOptions), so the two sets never differ in
// how they choose their directories, I/O mode or backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_options.h"
#include "offload/io_backend.h"
#include "offload/state_store.h"
#include "tierflow/nvme_io.h"

namespace tierflow {

struct SwapSetConfig {
  std::vector<std::string> paths;  // one directory per drive. REQUIRES: non-empty to create
  bool buffered = false;           // page-cache I/O instead of O_DIRECT (never a silent fallback)
  std::string run_id;              // names the set; "" = generated
  std::string owner;               // the set's owner record ("" = none)
  NvmeIoSettings io;               // request/checksum block, queue depth, rings
  offload::IoBackendFactory backend_factory;  // the ring backends; empty: io_uring
};

// The NVMe settings of `options` (nvme_paths, nvme_buffered, run_id,
// swap_owner, nvme_io, nvme_backend_factory).
SwapSetConfig SwapSetOf(const EngineOptions& options);

// `set` as a StateStore's options, with room for `spare_bytes` of rewrites
// per directory, rounded up to whole blocks.
offload::StateStoreOptions SwapStoreOptions(const SwapSetConfig& set, uint64_t spare_bytes);

}  // namespace tierflow

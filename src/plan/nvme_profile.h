// The NVMe store settings in a hardware profile: the "nvme_store" object that
// `tierflow bench nvme --tune` (and `bench all`) write beside the bandwidth
// rates, and that `tierflow train --profile` builds the NVMe tier with
// (schema: docs/PLANNER.md, "Bandwidth profile").
//
// A profile without "nvme_store" (every profile written before the tune
// existed) reads as "not tuned"; one with it must be whole and in bounds.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tierflow/nvme_io.h"
#include "tierflow/status.h"

namespace tierflow {

inline constexpr uint32_t kMaxNvmeInFlight = 64;

struct NvmeStoreProfile {
  NvmeIoSettings io;
  uint32_t in_flight = 2;  // sub-group transfers outstanding that the tune found best. 1..64
  // The store's rates at that setting when tuned (0 = not recorded).
  double write_gb_per_second = 0, read_gb_per_second = 0;
};

// {"block_size_bytes", "queue_depth", "num_rings", "in_flight",
//  "write_gb_per_second", "read_gb_per_second", "chosen_by"}.
nlohmann::json NvmeStoreProfileToJson(const NvmeStoreProfile& profile);

// The "nvme_store" object of a parsed profile `j`, or nullopt when it has
// none. InvalidArgument naming `source` and the field ("profile 'p.json':
// nvme_store.block_size_bytes: ...") for a missing, mistyped or
// out-of-bounds field: block_size_bytes a multiple of 4096 in 4 KiB..256 MiB,
// queue_depth 1..4096, num_rings 1..64, in_flight 1..64, rates positive.
// Unknown fields are ignored (later versions may add some).
StatusOr<std::optional<NvmeStoreProfile>> NvmeStoreProfileFromJson(const nlohmann::json& j,
                                                                   std::string_view source);

// Reads the profile file at `path` (at most 1 MiB, strict JSON, version 1)
// and returns its "nvme_store", or nullopt. Errors: NotFound naming the file,
// and those above.
StatusOr<std::optional<NvmeStoreProfile>> LoadNvmeStoreProfile(const std::string& path);

}  // namespace tierflow

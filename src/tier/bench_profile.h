// The bandwidth profile `tierflow bench all` writes and `tierflow plan
// --profile` reads (schema: docs/PLANNER.md, "Bandwidth profile"), built
// from the JSON outputs of `bench copy`, `bench adam` and `bench nvme`.
#pragma once

#include <nlohmann/json.hpp>

#include "tierflow/status.h"

namespace tierflow::tier {

// {"version": 1, "h2d_gb_per_second" (copy: h2d pinned, best),
//  "d2h_gb_per_second" (d2h pinned, best), "host_memory_gb_per_second"
//  (adam: the DRAM streaming limit measured beside it),
//  "adam_params_per_second", "nvme_read_gb_per_second",
//  "nvme_write_gb_per_second" (nvme: through the store)} plus the raw
// outputs under "measurements". A null input leaves its rates out (the
// planner then keeps its defaults for them). Errors: InvalidArgument naming
// the bench and key when an output lacks a rate or has a non-positive one.
StatusOr<nlohmann::json> MakeBandwidthProfile(const nlohmann::json& copy,
                                              const nlohmann::json& adam,
                                              const nlohmann::json& nvme);

}  // namespace tierflow::tier

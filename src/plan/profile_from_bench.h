// The bandwidth profile `tierflow bench all` writes and `tierflow plan
// --profile` reads (schema: docs/PLANNER.md, "Bandwidth profile"), built
// from the JSON outputs of `bench copy`, `bench adam` and `bench nvme`.
#pragma once

#include <nlohmann/json.hpp>

#include "tierflow/status.h"

namespace tierflow {

// {"version": 1, "h2d_gb_per_second" (copy: h2d pinned, best),
//  "d2h_gb_per_second" (d2h pinned, best), "host_memory_gb_per_second"
//  (adam: the DRAM streaming limit measured beside it),
//  "adam_params_per_second", "nvme_read_gb_per_second",
//  "nvme_write_gb_per_second" (nvme: through the store), "nvme_store" (the
// settings `bench nvme --tune` chose, when the nvme output has a "tune"
// section; plan/nvme_profile.h)} plus the raw outputs under "measurements". A
// null input leaves its rates out (the planner then keeps its defaults for
// them). Errors: InvalidArgument naming the bench and key when an output
// lacks a rate or has a non-positive one, or its tune choice is out of bounds.
StatusOr<nlohmann::json> MakeBandwidthProfile(const nlohmann::json& copy,
                                              const nlohmann::json& adam,
                                              const nlohmann::json& nvme);

// `profile` with the NVMe parts of `nvme` (a `bench nvme --json` output) set
// as MakeBandwidthProfile sets them; everything else in it is kept. Errors:
// as MakeBandwidthProfile's for nvme.
StatusOr<nlohmann::json> SetNvmeInProfile(nlohmann::json profile, const nlohmann::json& nvme);

// Writes the NVMe parts of `nvme` into the profile file at `path`
// (crash-safely), keeping what else it holds; creates {"version": 1, ...}
// when there is no file. Errors: InvalidArgument naming the file when it is
// not a version-1 profile (it is left alone), and those of the write.
Status WriteNvmeToProfileFile(const std::string& path, const nlohmann::json& nvme);

// `profile` with the collectives' bus bandwidth of `comm` (a `bench comm
// --json` output: "nodes" and "rows"): the slower of reduce-scatter and
// all-gather at the largest size, as "intra_node_busbw_gb_per_second" when
// the ranks were on one node, else "inter_node_busbw_gb_per_second"; the
// output itself under "measurements". Errors: InvalidArgument when the
// output lacks those rows or a positive busbw.
StatusOr<nlohmann::json> SetCommInProfile(nlohmann::json profile, const nlohmann::json& comm);
// Writes them into the profile file at `path` as WriteNvmeToProfileFile does.
Status WriteCommToProfileFile(const std::string& path, const nlohmann::json& comm);

}  // namespace tierflow

// The hardware profile: one JSON file per machine that the benches write and
// that plan and train read (schema: docs/PLANNER.md, "Bandwidth profile").
// It holds the measured rates the step-time prediction uses, and the NVMe
// store settings `bench nvme --tune` chose ("nvme_store").
//
//   where:  --profile FILE, else $XDG_CACHE_HOME/tierflow/profile.json, else
//           $HOME/.cache/tierflow/profile.json (the XDG convention for a cache:
//           it is measured, and can be measured again)
//   write:  `bench all` (MakeHardwareProfile), `bench nvme --tune --profile`
//           and `bench comm --profile` (each rewrites its own keys, keeping
//           the rest, crash-safely)
//   read:   LoadHardwareProfile, once per command (DescribeMachine in train
//           and plan); everything downstream takes the HardwareProfile value
//
// Implemented in hardware_profile_read.cc (parse, defaults, nvme_store),
// hardware_profile_path.cc (where) and hardware_profile_write.cc (write).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "plan/planner.h"
#include "tierflow/nvme_io.h"
#include "tierflow/status.h"

namespace tierflow {

inline constexpr uint32_t kMaxNvmeInFlight = 64;

// The "nvme_store" object: the NVMe tier's I/O settings the tune found best.
struct NvmeStoreProfile {
  NvmeIoSettings io;
  uint32_t in_flight = 2;  // sub-group transfers outstanding that the tune found best. 1..64
  // The store's rates at that setting when tuned (0 = not recorded).
  double write_gb_per_second = 0, read_gb_per_second = 0;
};

struct HardwareProfile {
  std::string path;  // the file it was read from
  // The base rates with those the file holds put in their place; `source`
  // says how many came from the file, `measured_unix` when.
  Bandwidths rates;
  // nullopt: the file has no "nvme_store" (not tuned; every profile written
  // before the tune existed).
  std::optional<NvmeStoreProfile> nvme_store;
};

// ---- Read ----

// Defaults, stated in docs/PLANNER.md, with source = "defaults":
// GPU: PCIe gen4 x16 at 25 GB/s each way, 200 TFLOP/s dense 16-bit at 40%
// efficiency. The emulated CPU device: copies at host memory speed, 50
// GFLOP/s per core at 40%. Host memory: 5 GB/s per core up to 40 GB/s. CPU
// optimizer: 1e8 parameters/s per core, capped by host memory bandwidth at
// 30 bytes moved per parameter. NVMe: 3 GB/s read, 2 GB/s write. Host
// collectives between ranks: host memory bandwidth / 8 within a node,
// 12.5 GB/s (100 Gb/s) between nodes.
Bandwidths DefaultBandwidths(bool device_is_gpu, int cores);

// Reads a profile's text: {"version": 1, "h2d_gb_per_second": ..., ...,
// "nvme_store": {...}}. Every rate key is optional (absent keys keep `base`'s
// value), and so are "measured_unix" and "nvme_store"; unknown keys are
// ignored so later bench versions can add fields. InvalidArgument naming
// `source` and the key for a wrong version, a non-positive or non-numeric
// rate, an "nvme_store" that is not whole and in bounds (block_size_bytes a
// multiple of 4096 in 4 KiB..256 MiB, queue_depth 1..4096, num_rings 1..64,
// in_flight 1..64, rates positive), or text that is not a JSON object.
StatusOr<HardwareProfile> ParseHardwareProfile(std::string_view json_text, std::string_view source,
                                               const Bandwidths& base);

// Reads the file at `path` (at most 1 MiB). Errors: NotFound naming it when
// it is missing, and those of ParseHardwareProfile.
StatusOr<HardwareProfile> LoadHardwareProfile(const std::string& path,
                                              const Bandwidths& base = Bandwidths{});

// The "nvme_store" object of a parsed profile `j`, or nullopt when it has
// none; errors as ParseHardwareProfile's for it ("profile 'p.json':
// nvme_store.block_size_bytes: ...").
StatusOr<std::optional<NvmeStoreProfile>> NvmeStoreProfileFromJson(const nlohmann::json& j,
                                                                   std::string_view source);

// ---- Where ----

// The default profile path. Relative values of XDG_CACHE_HOME are ignored,
// as the convention says. NotFound, saying to pass --profile, when neither
// variable is an absolute path.
StatusOr<std::string> DefaultProfilePath();

// The profile a command uses: `given` when set (it must exist: the load
// says so otherwise), else the default path when a file is there, else
// none (the built-in defaults). `looked_at` gets the default path looked
// at, for the message that says where a profile would have been. A file at
// the default path is read here: one that does not load (damaged, a wrong
// version) is InvalidArgument naming it and saying how to recover (re-run
// `tierflow bench all`, delete it, or pass --profile), since the user never
// named it.
StatusOr<std::optional<std::string>> ResolveProfilePath(const std::string& given,
                                                        std::string* looked_at);

// Which rates a run uses, for its log: Bandwidths::source, and for a
// profile that records when it was measured, how long before `now_unix`
// (e.g. "measured 3 h ago"); for the defaults, where a profile was looked
// for and how to make one.
std::string DescribeRates(const Bandwidths& rates, int64_t now_unix,
                          const std::string& default_path_looked_at);

// ---- Write ----

// {"block_size_bytes", "queue_depth", "num_rings", "in_flight",
//  "write_gb_per_second", "read_gb_per_second", "chosen_by"}.
nlohmann::json NvmeStoreProfileToJson(const NvmeStoreProfile& profile);

// The profile `bench all` writes, from the JSON outputs of `bench copy`,
// `bench adam` and `bench nvme`: {"version": 1, "h2d_gb_per_second" (copy:
// h2d pinned, best), "d2h_gb_per_second" (d2h pinned, best),
// "host_memory_gb_per_second" (adam: the DRAM streaming limit measured
// beside it), "adam_params_per_second", "nvme_read_gb_per_second",
// "nvme_write_gb_per_second" (nvme: through the store), "nvme_store" (the
// settings `bench nvme --tune` chose, when the nvme output has a "tune"
// section)} plus the raw outputs under "measurements". A null input leaves
// its rates out (the planner then keeps its defaults for them). Errors:
// InvalidArgument naming the bench and key when an output lacks a rate or
// has a non-positive one, or its tune choice is out of bounds.
StatusOr<nlohmann::json> MakeHardwareProfile(const nlohmann::json& copy, const nlohmann::json& adam,
                                             const nlohmann::json& nvme);

// `profile` with the NVMe parts of `nvme` (a `bench nvme --json` output) set
// as MakeHardwareProfile sets them; everything else in it is kept. Errors:
// as MakeHardwareProfile's for nvme.
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

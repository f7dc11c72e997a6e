// The rates the step-time prediction uses: stated defaults, or a profile
// saved by `tierflow bench` (schema in docs/PLANNER.md, "Bandwidth profile").
#pragma once

#include <string>
#include <string_view>

#include "plan/planner.h"

namespace tierflow {

// Defaults, stated in docs/PLANNER.md, with source = "defaults":
// GPU: PCIe gen4 x16 at 25 GB/s each way, 200 TFLOP/s dense 16-bit at 40%
// efficiency. The emulated CPU device: copies at host memory speed, 50
// GFLOP/s per core at 40%. Host memory: 5 GB/s per core up to 40 GB/s. CPU
// optimizer: 1e8 parameters/s per core, capped by host memory bandwidth at
// 30 bytes moved per parameter. NVMe: 3 GB/s read, 2 GB/s write. Host
// collectives between ranks: host memory bandwidth / 8 within a node,
// 12.5 GB/s (100 Gb/s) between nodes.
Bandwidths DefaultBandwidths(bool device_is_gpu, int cores);

// Reads a profile: {"version": 1, "h2d_gb_per_second": ..., ...}. Every rate
// key is optional (absent keys keep `base`'s value), and so is
// "measured_unix" (when `bench all` measured them); unknown keys are
// ignored so later bench versions can add fields. InvalidArgument naming
// `source` and the key for a wrong version, a non-positive or non-numeric
// rate, or text that is not a JSON object.
StatusOr<Bandwidths> ParseBandwidthProfile(std::string_view json_text, std::string_view source,
                                           const Bandwidths& base);
// Reads the file at `path`. Errors: those of ReadFileToString (NotFound when
// it is missing; it may hold at most 1 MiB) and of ParseBandwidthProfile.
StatusOr<Bandwidths> LoadBandwidthProfile(const std::string& path, const Bandwidths& base);

}  // namespace tierflow

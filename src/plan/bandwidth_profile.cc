// Default rates and `tierflow bench` profiles.
#include "plan/bandwidth_profile.h"

#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"

namespace tierflow {

Bandwidths DefaultBandwidths(bool device_is_gpu, int cores) {
  const double n = std::max(cores, 1);
  Bandwidths b;
  b.host_memory_gb_per_second = std::min(5.0 * n, 40.0);
  if (device_is_gpu) {
    b.h2d_gb_per_second = 25;
    b.d2h_gb_per_second = 25;
    b.device_tflops = 200;
  } else {
    // The emulated device's copies are memcpy: a read and a write per byte.
    b.h2d_gb_per_second = b.host_memory_gb_per_second / 2;
    b.d2h_gb_per_second = b.host_memory_gb_per_second / 2;
    b.device_tflops = 0.05 * n;
  }
  b.device_efficiency = 0.4;
  b.adam_params_per_second = std::min(1e8 * n, b.host_memory_gb_per_second * 1e9 / 30.0);
  b.nvme_read_gb_per_second = 3;
  b.nvme_write_gb_per_second = 2;
  // Host collectives: a ring step reads a peer's buffer and adds it into
  // its own, several passes over DRAM per byte that the node's ranks share.
  // Between nodes: a 100 Gb/s link per node.
  b.intra_node_busbw_gb_per_second = b.host_memory_gb_per_second / 8;
  b.inter_node_busbw_gb_per_second = 12.5;
  b.source = "defaults";
  return b;
}

StatusOr<Bandwidths> ParseBandwidthProfile(std::string_view json_text, std::string_view source,
                                           const Bandwidths& base) {
  const std::string src(source);
  nlohmann::json j;
  // Depth-limited; duplicate keys are an error: the profile is tierflow's own
  // format, so a repeated rate is a hand edit gone wrong, not a choice to guess.
  if (Status parsed = ParseJsonStrict(json_text, "bandwidth profile '" + src + "'", &j);
      !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  if (!j.is_object()) {
    return InvalidArgumentError("bandwidth profile '" + src + "' must hold a JSON object");
  }
  const JsonReader reader("bandwidth profile '" + src + "'");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != 1) {
    return reader.Error("version", "must be 1 (the schema is in docs/PLANNER.md)");
  }
  Bandwidths b = base;
  struct Key {
    const char* name;
    double* field;
  };
  const Key keys[] = {
      {"h2d_gb_per_second", &b.h2d_gb_per_second},
      {"d2h_gb_per_second", &b.d2h_gb_per_second},
      {"host_memory_gb_per_second", &b.host_memory_gb_per_second},
      {"adam_params_per_second", &b.adam_params_per_second},
      {"nvme_read_gb_per_second", &b.nvme_read_gb_per_second},
      {"nvme_write_gb_per_second", &b.nvme_write_gb_per_second},
      {"device_tflops", &b.device_tflops},
      {"device_efficiency", &b.device_efficiency},
      {"intra_node_busbw_gb_per_second", &b.intra_node_busbw_gb_per_second},
      {"inter_node_busbw_gb_per_second", &b.inter_node_busbw_gb_per_second},
  };
  const int rates = static_cast<int>(std::size(keys));
  int found = 0;
  for (const Key& k : keys) {
    auto it = j.find(k.name);
    if (it == j.end()) continue;
    TF_RETURN_IF_ERROR(reader.PositiveNumber(*it, k.name, k.field));
    ++found;
  }
  if (auto at = j.find("measured_unix"); at != j.end()) {
    if (!at->is_number_integer() || at->get<int64_t>() <= 0) {
      return reader.Error("measured_unix", "must be a positive integer (Unix seconds)");
    }
    b.measured_unix = at->get<int64_t>();
  }
  if (b.device_efficiency > 1) {
    return reader.Error("device_efficiency",
                        "must be at most 1, got " + std::to_string(b.device_efficiency));
  }
  b.source = "profile " + src + " (" + std::to_string(found) + " of " + std::to_string(rates) +
             " rates" + (found < rates ? ", the rest " + base.source : std::string()) + ")";
  return b;
}

StatusOr<Bandwidths> LoadBandwidthProfile(const std::string& path, const Bandwidths& base) {
  // A profile is a few hundred bytes; 1 MiB refuses a wrong path by name.
  auto text = ReadFileToString(path, 1u << 20);
  if (!text.ok()) return text.status().WithContext("bandwidth profile");
  return ParseBandwidthProfile(*text, path, base);
}

}  // namespace tierflow

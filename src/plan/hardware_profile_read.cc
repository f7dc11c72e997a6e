// Reading a hardware profile: the default rates, the rates a profile holds,
// and its "nvme_store".
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"
#include "plan/hardware_profile.h"

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

namespace {

// The rates: each key present replaces `base`'s; `source` says how many.
StatusOr<Bandwidths> RatesFromJson(const nlohmann::json& j, const JsonReader& reader,
                                   const std::string& src, const Bandwidths& base) {
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

}  // namespace

StatusOr<HardwareProfile> ParseHardwareProfile(std::string_view json_text, std::string_view source,
                                               const Bandwidths& base) {
  const std::string src(source);
  const std::string label = "hardware profile '" + src + "'";
  nlohmann::json j;
  // Depth-limited; duplicate keys are an error: the profile is tierflow's own
  // format, so a repeated rate is a hand edit gone wrong, not a choice to guess.
  if (Status parsed = ParseJsonStrict(json_text, label, &j); !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  if (!j.is_object()) return InvalidArgumentError(label + " must hold a JSON object");
  const JsonReader reader(label);
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != 1) {
    return reader.Error("version", "must be 1 (the schema is in docs/PLANNER.md)");
  }
  HardwareProfile p;
  p.path = src;
  TF_ASSIGN_OR_RETURN(p.rates, RatesFromJson(j, reader, src, base));
  TF_ASSIGN_OR_RETURN(p.nvme_store, NvmeStoreProfileFromJson(j, src));
  return p;
}

StatusOr<HardwareProfile> LoadHardwareProfile(const std::string& path, const Bandwidths& base) {
  // A profile is a few kilobytes; 1 MiB refuses a wrong path by name.
  auto text = ReadFileToString(path, 1u << 20);
  if (!text.ok()) return text.status().WithContext("hardware profile");
  return ParseHardwareProfile(*text, path, base);
}

StatusOr<std::optional<NvmeStoreProfile>> NvmeStoreProfileFromJson(const nlohmann::json& j,
                                                                   std::string_view source) {
  const std::string label = "hardware profile '" + std::string(source) + "'";
  const JsonReader reader(label);
  const nlohmann::json* section = JsonReader::Find(j, "nvme_store");
  if (section == nullptr) return std::optional<NvmeStoreProfile>();
  TF_RETURN_IF_ERROR(reader.Object(*section, "nvme_store"));
  NvmeStoreProfile p;
  struct Field {
    const char* name;
    int64_t max;
    uint32_t* out;
  };
  const Field fields[] = {
      {"block_size_bytes", kNvmeIoMaxBlockBytes, &p.io.block_size_bytes},
      {"queue_depth", kNvmeIoMaxQueueDepth, &p.io.queue_depth},
      {"num_rings", kNvmeIoMaxRings, &p.io.num_rings},
      {"in_flight", kMaxNvmeInFlight, &p.in_flight},
  };
  for (const Field& f : fields) {
    const std::string path = std::string("nvme_store.") + f.name;
    const nlohmann::json* v = JsonReader::Find(*section, f.name);
    if (v == nullptr) {
      return reader.Error(path, "missing; rerun `tierflow bench nvme --tune --profile FILE`");
    }
    int64_t n = 0;
    TF_RETURN_IF_ERROR(reader.Int(*v, path, 1, f.max, &n));
    *f.out = static_cast<uint32_t>(n);
  }
  TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(p.io, label + ": nvme_store"));
  for (auto [name, out] :
       {std::pair<const char*, double*>{"write_gb_per_second", &p.write_gb_per_second},
        {"read_gb_per_second", &p.read_gb_per_second}}) {
    if (const nlohmann::json* v = JsonReader::Find(*section, name)) {
      TF_RETURN_IF_ERROR(reader.PositiveNumber(*v, std::string("nvme_store.") + name, out));
    }
  }
  return std::optional<NvmeStoreProfile>(p);
}

}  // namespace tierflow

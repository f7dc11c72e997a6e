// Writing the hardware profile from the benches' JSON.
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "io/file_reader.h"
#include "io/file_system.h"
#include "io/json_util.h"
#include "plan/hardware_profile.h"

namespace tierflow {
namespace {

constexpr char kChosenBy[] =
    "least time to write and then read the same bytes through the store (one setting serves "
    "both: the block size is the swap files' layout)";

StatusOr<double> Rate(const nlohmann::json& j, const char* bench, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number() || !(j[key].get<double>() > 0)) {
    return InvalidArgumentError(std::string("bench ") + bench + " output has no positive '" + key +
                                "'");
  }
  return j[key].get<double>();
}

StatusOr<double> CopyRate(const nlohmann::json& copy, const std::string& direction) {
  if (copy.is_object() && copy.contains("results") && copy["results"].is_array()) {
    for (const auto& r : copy["results"]) {
      // Compared as JSON values: value() would throw on a field of another type.
      if (r.is_object() && r.contains("direction") && r["direction"] == direction &&
          r.contains("host_memory") && r["host_memory"] == "pinned") {
        return Rate(r, "copy", "best_gb_per_second");
      }
    }
  }
  return InvalidArgumentError("bench copy output has no pinned " + direction + " result");
}

}  // namespace

nlohmann::json NvmeStoreProfileToJson(const NvmeStoreProfile& p) {
  nlohmann::json j = {{"block_size_bytes", p.io.block_size_bytes},
                      {"queue_depth", p.io.queue_depth},
                      {"num_rings", p.io.num_rings},
                      {"in_flight", p.in_flight},
                      {"chosen_by", kChosenBy}};
  if (p.write_gb_per_second > 0) j["write_gb_per_second"] = p.write_gb_per_second;
  if (p.read_gb_per_second > 0) j["read_gb_per_second"] = p.read_gb_per_second;
  return j;
}

StatusOr<nlohmann::json> MakeHardwareProfile(const nlohmann::json& copy, const nlohmann::json& adam,
                                             const nlohmann::json& nvme) {
  nlohmann::json p = {{"version", 1}};
  nlohmann::json raw = nlohmann::json::object();
  if (!copy.is_null()) {
    TF_ASSIGN_OR_RETURN(p["h2d_gb_per_second"], CopyRate(copy, "h2d"));
    TF_ASSIGN_OR_RETURN(p["d2h_gb_per_second"], CopyRate(copy, "d2h"));
    raw["copy"] = copy;
  }
  if (!adam.is_null()) {
    TF_ASSIGN_OR_RETURN(p["adam_params_per_second"], Rate(adam, "adam", "params_per_second"));
    TF_ASSIGN_OR_RETURN(p["host_memory_gb_per_second"],
                        Rate(adam, "adam", "bandwidth_limit_gb_per_second"));
    raw["adam"] = adam;
  }
  p["measurements"] = std::move(raw);
  if (!nvme.is_null()) return SetNvmeInProfile(std::move(p), nvme);
  return p;
}

StatusOr<nlohmann::json> SetNvmeInProfile(nlohmann::json p, const nlohmann::json& nvme) {
  TF_ASSIGN_OR_RETURN(p["nvme_read_gb_per_second"], Rate(nvme, "nvme", "read_gb_per_second"));
  TF_ASSIGN_OR_RETURN(p["nvme_write_gb_per_second"], Rate(nvme, "nvme", "write_gb_per_second"));
  if (nvme.contains("tune")) {
    // The choice goes through the profile's own reader, so what is written
    // is what `train --profile` accepts.
    const nlohmann::json& tune = nvme["tune"];
    if (!tune.is_object() || !tune.contains("chosen")) {
      return InvalidArgumentError("bench nvme output has a 'tune' without 'chosen'");
    }
    TF_ASSIGN_OR_RETURN(std::optional<NvmeStoreProfile> chosen,
                        NvmeStoreProfileFromJson({{"nvme_store", tune["chosen"]}},
                                                 "bench nvme output, tune.chosen"));
    p["nvme_store"] = NvmeStoreProfileToJson(*chosen);
  }
  if (!p.contains("measurements") || !p["measurements"].is_object()) {
    p["measurements"] = nlohmann::json::object();
  }
  p["measurements"]["nvme"] = nvme;
  return p;
}

namespace {

// The profile at `path`, or a new one when there is none.
StatusOr<nlohmann::json> ReadProfileToUpdate(const std::string& path) {
  nlohmann::json profile = {{"version", 1}};
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    TF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, 1u << 20));
    nlohmann::json j;
    if (Status s = ParseJsonStrict(text, "profile '" + path + "'", &j); !s.ok()) {
      return InvalidArgumentError(s.message() + "; not overwriting it: name another --profile");
    }
    if (!j.is_object() || !j.contains("version") || j["version"] != 1) {
      return InvalidArgumentError("profile '" + path +
                                  "' is not a version-1 tierflow profile; not overwriting it: "
                                  "name another --profile");
    }
    profile = std::move(j);
  }
  return profile;
}

}  // namespace

Status WriteNvmeToProfileFile(const std::string& path, const nlohmann::json& nvme) {
  TF_ASSIGN_OR_RETURN(nlohmann::json profile, ReadProfileToUpdate(path));
  TF_ASSIGN_OR_RETURN(profile, SetNvmeInProfile(std::move(profile), nvme));
  return WriteStringToFileAtomically(nullptr, path, JsonOutput(profile) + "\n");
}

StatusOr<nlohmann::json> SetCommInProfile(nlohmann::json profile, const nlohmann::json& comm) {
  if (!comm.is_object() || !comm.contains("rows") || !comm["rows"].is_array() ||
      !comm.contains("nodes") || !comm["nodes"].is_number_integer() || comm["nodes"] < 1) {
    return InvalidArgumentError("bench comm output has no 'rows' and 'nodes'");
  }
  // The largest size measured, where the bus bandwidth has settled: the
  // slower of reduce-scatter and all-gather (the two the engine issues).
  uint64_t largest = 0;
  for (const nlohmann::json& r : comm["rows"]) {
    if (r.is_object() && r.contains("bytes") && r["bytes"].is_number_unsigned()) {
      largest = std::max(largest, r["bytes"].get<uint64_t>());
    }
  }
  double busbw = 0;
  int found = 0;
  for (const nlohmann::json& r : comm["rows"]) {
    if (!r.is_object() || !r.contains("op") || !r.contains("bytes") || r["bytes"] != largest) {
      continue;
    }
    if (r["op"] != "reduce_scatter" && r["op"] != "all_gather") continue;
    TF_ASSIGN_OR_RETURN(double rate, Rate(r, "comm", "busbw_gb_per_second"));
    busbw = found == 0 ? rate : std::min(busbw, rate);
    ++found;
  }
  if (found != 2) {
    return InvalidArgumentError(
        "bench comm output has no reduce_scatter and all_gather rows at its largest size");
  }
  const bool across = comm["nodes"].get<int>() > 1;
  profile[across ? "inter_node_busbw_gb_per_second" : "intra_node_busbw_gb_per_second"] = busbw;
  profile["measurements"][across ? "comm_inter_node" : "comm_intra_node"] = comm;
  return profile;
}

Status WriteCommToProfileFile(const std::string& path, const nlohmann::json& comm) {
  TF_ASSIGN_OR_RETURN(nlohmann::json profile, ReadProfileToUpdate(path));
  TF_ASSIGN_OR_RETURN(profile, SetCommInProfile(std::move(profile), comm));
  // A profile this bench starts says when it was measured.
  if (!profile.contains("measured_unix")) {
    profile["measured_unix"] = static_cast<int64_t>(std::time(nullptr));
  }
  return WriteStringToFileAtomically(nullptr, path, JsonOutput(profile) + "\n");
}

}  // namespace tierflow

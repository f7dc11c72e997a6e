// Building the bandwidth profile from the benches' JSON.
#include "tier/bench_profile.h"

#include <string>

namespace tierflow::tier {
namespace {

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

StatusOr<nlohmann::json> MakeBandwidthProfile(const nlohmann::json& copy,
                                              const nlohmann::json& adam,
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
  if (!nvme.is_null()) {
    TF_ASSIGN_OR_RETURN(p["nvme_read_gb_per_second"], Rate(nvme, "nvme", "read_gb_per_second"));
    TF_ASSIGN_OR_RETURN(p["nvme_write_gb_per_second"], Rate(nvme, "nvme", "write_gb_per_second"));
    raw["nvme"] = nvme;
  }
  p["measurements"] = std::move(raw);
  return p;
}

}  // namespace tierflow::tier

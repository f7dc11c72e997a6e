// The default profile's location, and the line that says which rates a run uses.
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "plan/hardware_profile.h"

namespace tierflow {

StatusOr<std::string> DefaultProfilePath() {
  auto absolute = [](const char* value) {
    return value != nullptr && value[0] == '/' ? std::optional<std::string>(value) : std::nullopt;
  };
  if (auto cache = absolute(std::getenv("XDG_CACHE_HOME"))) {
    return *cache + "/tierflow/profile.json";
  }
  if (auto home = absolute(std::getenv("HOME"))) return *home + "/.cache/tierflow/profile.json";
  return NotFoundError(
      "no default profile location: neither XDG_CACHE_HOME nor HOME is an absolute path; pass "
      "--profile FILE");
}

StatusOr<std::optional<std::string>> ResolveProfilePath(const std::string& given,
                                                        std::string* looked_at) {
  looked_at->clear();
  if (!given.empty()) return std::optional<std::string>(given);
  StatusOr<std::string> path = DefaultProfilePath();
  if (!path.ok()) return std::optional<std::string>();  // nowhere to look: the defaults
  *looked_at = *path;
  std::error_code ec;
  const bool exists = std::filesystem::exists(*path, ec);
  if (ec) {
    return IoError("the default hardware profile " + *path + ": " + ec.message() +
                   "; fix its directory's permissions or pass --profile");
  }
  if (!exists) return std::optional<std::string>();
  // Nobody named this file, so whoever reads the error may not know it is
  // there: read it now, and on any fault say which file it is and how to get
  // a good one (it is a cache: measured, and measurable again).
  Status readable = LoadHardwareProfile(*path, DefaultBandwidths(false, 1)).status();
  if (!readable.ok()) {
    return InvalidArgumentError(
        "the cached hardware profile " + *path +
        " (which `tierflow bench all` wrote, read because no --profile was given) cannot be "
        "used: " +
        readable.message() +
        ". Re-run `tierflow bench all` to measure this machine again and "
        "rewrite it, or delete it to plan with the built-in rates, or pass --profile FILE");
  }
  return std::optional<std::string>(*path);
}

std::string DescribeRates(const Bandwidths& rates, int64_t now_unix,
                          const std::string& default_path_looked_at) {
  std::string out = rates.source;
  if (rates.measured_unix > 0) {
    const int64_t age = now_unix - rates.measured_unix;
    if (age < 0) {
      out += ", measured in the future by this clock (" + std::to_string(-age) + " s ahead)";
    } else if (age < 120) {
      out += ", measured " + std::to_string(age) + " s ago";
    } else if (age < 2 * 3600) {
      out += ", measured " + std::to_string(age / 60) + " min ago";
    } else if (age < 2 * 86400) {
      out += ", measured " + std::to_string(age / 3600) + " h ago";
    } else {
      out += ", measured " + std::to_string(age / 86400) + " days ago";
    }
  } else if (rates.source.rfind("profile ", 0) == 0) {
    out += ", of unknown age (written before profiles recorded it)";
  } else if (!default_path_looked_at.empty()) {
    out += "; no profile at " + default_path_looked_at +
           ": `tierflow bench all` measures this machine and writes one there";
  }
  return out;
}

}  // namespace tierflow

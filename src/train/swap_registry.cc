// The swap-run registry (train/swap_registry.h), for one process or every
// rank of a data-parallel run.
#include "train/swap_registry.h"

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/swap_set_owner.h"
#include "comm/agree.h"
#include "common/path_component.h"
#include "engine/streamed_weights.h"
#include "io/file_reader.h"
#include "io/file_system.h"
#include "io/json_util.h"
#include "offload/swap_set.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;

// Under BroadcastString's 1 MiB: a registry the lead can send its ranks.
constexpr size_t kMaxRegistryBytes = 512u << 10;
constexpr size_t kMaxOtherHostRuns = 256;

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// Every rank's `mine`, in rank order (one broadcast per rank: the strings
// are short and this runs once per run).
StatusOr<std::vector<std::string>> ShareStrings(comm::Communicator* comm, const std::string& mine) {
  if (comm == nullptr) return std::vector<std::string>{mine};
  std::vector<std::string> all(static_cast<size_t>(comm->world_size()));
  for (int r = 0; r < comm->world_size(); ++r) {
    std::string s = comm->rank() == r ? mine : std::string();
    TF_RETURN_IF_ERROR(comm::BroadcastString(*comm, &s, r));
    all[static_cast<size_t>(r)] = std::move(s);
  }
  return all;
}

// The registry's entries (an array); a note and none when unreadable.
nlohmann::json ParseRegistry(const std::string& text, const std::string& path,
                             TrainReporter& reporter) {
  if (text.empty()) return nlohmann::json::array();
  nlohmann::json parsed;
  // Depth-limited and non-throwing: the file is on disk, so outside input.
  Status s = ParseJsonStrict(text, path, &parsed);
  if (s.ok() && parsed.is_array()) return parsed;
  reporter.OnNote("ignoring unreadable " + path + (s.ok() ? "" : ": " + s.message()));
  return nlohmann::json::array();
}

bool WellFormed(const nlohmann::json& run) {
  return run.is_object() && run.contains("run_id") && run["run_id"].is_string() &&
         run.contains("paths") && run["paths"].is_array() &&
         (!run.contains("host") || run["host"].is_string());
}

// Removes `run`'s stale sets that this output directory's runs made (the
// ownership rule, checkpoint/swap_set_owner.h: the registry only says where
// to look); whether any of its sets is still there for a later run to
// remove (live: another process runs in that directory; or its removal
// failed), so its entry stays. A set the rule keeps is noted and its entry
// dropped: no later run of this directory may remove it either.
bool CleanRun(const nlohmann::json& run, const std::string& out_dir, TrainReporter& reporter) {
  const std::string id = run["run_id"];
  // The run's optimizer state and its streamed weights (a set of their own).
  const std::set<std::string> ids{id, StreamedWeightsRunId(id)};
  const SwapSetRemover me{SwapSetRemover::Kind::kOutputDir, out_dir};
  bool still_there = false;
  for (const auto& path : run["paths"]) {
    if (!path.is_string()) continue;
    const std::string dir = path.get<std::string>();
    // A hint from a file on disk: only an absolute path is looked at.
    if (!CheckAbsolutePath(dir, "swap directory").ok()) {
      reporter.OnNote("ignoring swap directory " + QuotedExcerpt(dir) + " in " + out_dir +
                      "/swap_runs.json: not an absolute path");
      continue;
    }
    auto sets = offload::ListSwapSets(dir);
    if (!sets.ok()) continue;
    for (const auto& set : *sets) {
      if (ids.count(set.run_id) == 0) continue;
      if (set.state == offload::SwapSetState::kLive) {
        still_there = true;
        continue;
      }
      auto verdict = RemoveSwapSetIfAllowed(dir, set, me);
      if (!verdict.ok()) {
        reporter.OnNote("could not remove stale swap set " + set.path + ": " +
                        verdict.status().ToString());
        still_there = true;
      } else if (verdict->remove) {
        reporter.OnNote("removed stale swap set " + set.path + " " + verdict->why);
      } else {
        reporter.OnNote("kept stale swap set " + set.path + ": " + verdict->why);
      }
    }
  }
  return still_there;
}

}  // namespace

Status CleanStaleSwapSets(comm::Communicator* comm, const std::string& out_dir,
                          const std::vector<std::string>& nvme_paths, const std::string& run_id,
                          TrainReporter& reporter) {
  const bool lead = comm == nullptr || comm->rank() == 0;
  const int rank = comm == nullptr ? 0 : comm->rank();
  const std::string registry = out_dir + "/swap_runs.json";
  const std::string host = HostName();
  // 1. Every rank's host and new entry.
  nlohmann::json mine = {{"host", host}};
  if (!run_id.empty()) mine = {{"run_id", run_id}, {"paths", nvme_paths}, {"host", host}};
  TF_ASSIGN_OR_RETURN(std::vector<std::string> shared, ShareStrings(comm, mine.dump()));
  std::vector<nlohmann::json> ranks;
  std::map<std::string, int> cleaner;  // host -> its first rank
  for (size_t r = 0; r < shared.size(); ++r) {
    nlohmann::json j;
    TF_RETURN_IF_ERROR(ParseJsonStrict(shared[r], "rank " + std::to_string(r) + "'s swap set", &j));
    cleaner.emplace(j.value("host", std::string()), static_cast<int>(r));
    ranks.push_back(std::move(j));
  }
  // 2. The registry as the lead reads it, the same text for every rank.
  std::string text;
  if (lead) {
    std::error_code ec;
    if (fs::exists(registry, ec)) {
      auto t = ReadFileToString(registry, 16u << 20);
      if (t.ok() && t->size() > kMaxRegistryBytes) {
        // Broadcast to the ranks, it must stay small; it never should grow
        // this far (other hosts' entries are bounded below).
        reporter.OnNote("ignoring " + registry + " (" + std::to_string(t->size()) +
                        " bytes, more than a registry of swap sets should hold); rewriting it");
      } else if (t.ok()) {
        text = std::move(*t);
      } else {
        reporter.OnNote("ignoring unreadable " + registry + ": " + t.status().message());
      }
    }
  }
  if (comm != nullptr) TF_RETURN_IF_ERROR(comm::BroadcastString(*comm, &text, 0));
  TrainReporter quiet;  // a registry that cannot be read is the lead's to report
  const nlohmann::json runs = ParseRegistry(text, registry, lead ? reporter : quiet);
  // 3. Each host's first rank cleans that host's entries (an entry without
  // a host is the lead's host's).
  const std::string lead_host = ranks[0].value("host", std::string());
  auto host_of = [&](const nlohmann::json& run) { return run.value("host", lead_host); };
  nlohmann::json still_there = nlohmann::json::array();  // indices into runs
  if (cleaner[host] == rank) {
    for (size_t i = 0; i < runs.size(); ++i) {
      if (WellFormed(runs[i]) && host_of(runs[i]) == host && CleanRun(runs[i], out_dir, reporter)) {
        still_there.push_back(i);
      }
    }
  }
  // 4. The lead learns what each cleaner kept and rewrites the registry:
  // the entries of this run's hosts still there, the other hosts' as they
  // were, and this run's.
  TF_ASSIGN_OR_RETURN(std::vector<std::string> kept, ShareStrings(comm, still_there.dump()));
  Status written = [&]() -> Status {
    if (!lead) return Status::Ok();
    std::set<size_t> keep;
    for (const std::string& k : kept) {
      nlohmann::json list;
      TF_RETURN_IF_ERROR(ParseJsonStrict(k, "a rank's kept swap runs", &list));
      for (const nlohmann::json& i : list) {
        if (i.is_number_unsigned()) keep.insert(i.get<size_t>());
      }
    }
    nlohmann::json out = nlohmann::json::array();
    // Other hosts' entries cannot be checked from here: the latest
    // kMaxOtherHostRuns of them are kept for a later run there.
    size_t others = 0;
    for (const nlohmann::json& run : runs) {
      if (WellFormed(run) && cleaner.count(host_of(run)) == 0) ++others;
    }
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!WellFormed(runs[i])) continue;
      if (cleaner.count(host_of(runs[i])) == 0) {
        if (others-- <= kMaxOtherHostRuns) out.push_back(runs[i]);
      } else if (keep.count(i) > 0) {
        out.push_back(runs[i]);
      }
    }
    for (const nlohmann::json& r : ranks) {
      if (r.contains("run_id")) out.push_back(r);
    }
    return WriteStringToFileAtomically(nullptr, registry, out.dump(2));
  }();
  return comm != nullptr ? comm::AgreeOnStatus(*comm, written) : written;
}

}  // namespace tierflow

// Where a machine's bandwidth profile lives when nobody names one:
// `tierflow bench all` writes it there, and `tierflow plan` and `tierflow
// train` read it from there unless given --profile. The XDG base-directory
// convention for a cache (it is measured, and can be measured again):
// $XDG_CACHE_HOME/tierflow/profile.json, else $HOME/.cache/tierflow/profile.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plan/planner.h"
#include "tierflow/status.h"

namespace tierflow {

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

}  // namespace tierflow

// Strict JSON parsing for files tierflow reads: errors are Statuses, duplicate keys are errors.
//
// nlohmann-json throws on syntax errors and silently keeps one value of a
// duplicated key; a checkpoint header or index with a duplicated tensor name
// is corrupt, so it must be reported, not resolved by parser whim.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tierflow/status.h"

namespace tierflow {

// Parses `text` into `out`. Errors (DataLoss, message prefixed with `what`):
// not valid JSON (with the byte position), or a key that appears twice in one
// object ("key \"k\" appears twice inside \"parent\"" or "... at top level").
Status ParseJsonStrict(std::string_view text, std::string_view what, nlohmann::json* out);

// Reads a whole (small) file, e.g. an index or config.json. Errors: ErrnoStatus
// naming the path; InvalidArgument if it is larger than `max_num_bytes`.
StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_num_bytes);

}  // namespace tierflow

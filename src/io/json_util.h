// JSON parsing for every file tierflow reads: errors are Statuses, nesting is
// bounded, duplicate keys are errors where the format says so.
//
// nlohmann-json throws on syntax errors and silently keeps one value of a
// duplicated key; a checkpoint header or index with a duplicated tensor name
// is corrupt, so it must be reported, not resolved by parser whim.
// nlohmann parses iteratively, but serializing (dump) and copying a value
// recurse: a 100000-deep array in a 200 KB file would overflow the stack the
// first time an error message or a copy touched it. So every parse rejects
// nesting deeper than kMaxJsonDepth, and error messages show outside values
// through JsonExcerpt, never whole.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tierflow/status.h"

namespace tierflow {

// Deeper than any file tierflow reads (tokenizer.json nests about 6 levels).
inline constexpr int kMaxJsonDepth = 64;

struct JsonParseOptions {
  int max_depth = kMaxJsonDepth;      // arrays/objects nested deeper are an error
  bool reject_duplicate_keys = true;  // false: the last value wins, as Python's json
  bool allow_comments = false;
};

// Parses `text` into `out`. Errors (DataLoss, message prefixed with `what`):
// not valid JSON (with the byte position), nested deeper than
// options.max_depth, or a key that appears twice in one object ("key \"k\"
// appears twice inside \"parent\"" or "... at top level"). Never throws.
Status ParseJson(std::string_view text, std::string_view what, const JsonParseOptions& options,
                 nlohmann::json* out);

// ParseJson with the default options (depth-limited, duplicate keys rejected).
Status ParseJsonStrict(std::string_view text, std::string_view what, nlohmann::json* out);

// A short description of an outside value for an error message: scalars as
// JSON (strings cut to `max_chars`, invalid UTF-8 replaced), arrays and
// objects by kind and size ("an array of 3 elements"). Never throws.
std::string JsonExcerpt(const nlohmann::json& value, size_t max_chars = 64);

// `value` as text for a command's --json output: dump(indent) with every
// string (keys too) passed through EscapeInvalidUtf8 (common/printable.h),
// so outside text in it (a path that is not UTF-8) comes out as \xNN
// instead of making nlohmann-json throw. Never throws.
std::string JsonOutput(const nlohmann::json& value, int indent = 2);

// Typed, non-throwing reads of one field of an outside JSON object (nlohmann's
// value() and get() throw type_error on a field of the wrong type, which a
// crafted or damaged file must not turn into an abort). `where` names the
// object for errors, e.g. "CKPT/trainer_state.json: units[3]"; the message
// then reads "WHERE.KEY must be a string, not 7" (the value via JsonExcerpt),
// or "FILE: KEY ..." when `where` is a bare file name (holds no ": ").
// `obj` that is not an object is an error; with kOptional a missing key leaves
// *out unchanged (it keeps the caller's default). Errors: DataLoss.
enum class JsonField { kRequired, kOptional };
Status GetJsonString(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     std::string* out, JsonField presence = JsonField::kRequired);
// A non-negative integer (a float such as 3.0 is not accepted).
Status GetJsonUint64(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     uint64_t* out, JsonField presence = JsonField::kRequired);
Status GetJsonInt64(const nlohmann::json& obj, std::string_view key, std::string_view where,
                    int64_t* out, JsonField presence = JsonField::kRequired);
// Any JSON number (integers included).
Status GetJsonDouble(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     double* out, JsonField presence = JsonField::kRequired);
// The field itself, which must be an array (GetJsonArray) or an object
// (GetJsonObject); *out points into `obj`. kOptional and missing: *out unchanged.
Status GetJsonArray(const nlohmann::json& obj, std::string_view key, std::string_view where,
                    const nlohmann::json** out, JsonField presence = JsonField::kRequired);
Status GetJsonObject(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     const nlohmann::json** out, JsonField presence = JsonField::kRequired);

}  // namespace tierflow

// Shared reading of tokenizer.json components: each is an object with a
// "type" and typed fields, and every error names the field's path
// ("tokenizer.json: pre_tokenizer.pretokenizers[0].behavior: ...").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "data/regex_pattern.h"
#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

// The component's "type" string. Errors: InvalidArgument when `spec` is not
// an object with a string "type".
StatusOr<std::string> ComponentTypeOf(const nlohmann::json& spec, const JsonReader& reader,
                                      const std::string& path);
// The string field `key`. Errors: InvalidArgument when missing or not a string.
StatusOr<std::string> RequiredString(const nlohmann::json& spec, const JsonReader& reader,
                                     const std::string& path, std::string_view key);
// The boolean field `key`, or `fallback` when missing or null.
StatusOr<bool> OptionalBool(const nlohmann::json& spec, const JsonReader& reader,
                            const std::string& path, std::string_view key, bool fallback);
// The array field `key`. Errors: InvalidArgument when missing or not an array.
StatusOr<const nlohmann::json*> RequiredArray(const nlohmann::json& spec, const JsonReader& reader,
                                              const std::string& path, std::string_view key);

// A "pattern" field: {"String": "..."} (a literal) or {"Regex": "..."}.
struct HfPattern {
  std::string literal;                // when regex is unset
  std::optional<RegexPattern> regex;  // set for {"Regex": ...}
};
StatusOr<HfPattern> ParseHfPattern(const nlohmann::json& spec, const JsonReader& reader,
                                   const std::string& path);

// Unimplemented: "LABEL: PATH: the KIND \"TYPE\" is not supported (supported: LIST)".
Status UnsupportedComponent(const JsonReader& reader, const std::string& path,
                            std::string_view kind, std::string_view type,
                            std::string_view supported);

// `text` with every occurrence of `from` (non-empty) replaced by `to`.
std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to);
// The same, or nullopt as soon as the result would hold more than `max_bytes`
// (nothing larger is built).
std::optional<std::string> ReplaceAllWithin(std::string_view text, std::string_view from,
                                            std::string_view to, size_t max_bytes);

}  // namespace tierflow

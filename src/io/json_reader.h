// Typed, non-throwing reads of outside JSON values (configs, profiles), each
// error naming the document and the value's path inside it.
//
// nlohmann's get<T>() throws on a value of the wrong type, and narrowing it
// silently wraps; the parsers of user-written files (the DeepSpeed config,
// config.json, bandwidth profiles, tokenizer.json) read through a JsonReader
// instead, so a mistyped or out-of-range value is a Status of the form
// "LABEL: PATH: expected an integer, got \"7\"" (the value shown through
// JsonExcerpt, never whole). Files tierflow writes itself are read with the
// GetJson* helpers of json_util.h, whose errors are DataLoss.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tierflow/status.h"

namespace tierflow {

// Every read checks the type (and range) first; on error it returns
// InvalidArgument naming LABEL and PATH and leaves *out unchanged. PATH is the
// caller's name for the value ("optimizer.params.betas[1]"). Immutable, so
// thread-safe.
class JsonReader {
 public:
  // `label` names the document in every error (usually its path).
  explicit JsonReader(std::string label) : label_(std::move(label)) {}

  const std::string& label() const { return label_; }

  // InvalidArgument "LABEL: PATH: WHAT".
  Status Error(std::string_view path, std::string_view what) const;
  // Error(path, "expected EXPECTED, got VALUE").
  Status TypeError(std::string_view path, std::string_view expected, const nlohmann::json& v) const;

  // A finite JSON number.
  Status Number(const nlohmann::json& v, std::string_view path, double* out) const;
  // A number > 0 (and finite).
  Status PositiveNumber(const nlohmann::json& v, std::string_view path, double* out) const;
  // An integer in [min_value, max_value]. An integral float such as 1e9 is
  // accepted (DeepSpeed configs write counts that way); 2.5 is not. A value
  // out of range is reported as written, never narrowed first.
  Status Int(const nlohmann::json& v, std::string_view path, int64_t min_value, int64_t max_value,
             int64_t* out) const;
  Status Bool(const nlohmann::json& v, std::string_view path, bool* out) const;
  Status String(const nlohmann::json& v, std::string_view path, std::string* out) const;
  // A string, or an array of strings (one string is a list of one).
  Status StringList(const nlohmann::json& v, std::string_view path,
                    std::vector<std::string>* out) const;
  // OK when `v` is an object.
  Status Object(const nlohmann::json& v, std::string_view path) const;

  // The field `key` of `obj`, or nullptr when `obj` is not an object or the
  // field is missing or null (JSON null reads as "not given").
  static const nlohmann::json* Find(const nlohmann::json& obj, std::string_view key);

 private:
  std::string label_;
};

}  // namespace tierflow

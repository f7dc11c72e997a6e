// Shared reading of tokenizer.json components.
#include "data/hf_component.h"

#include <limits>

namespace tierflow {

using Json = nlohmann::json;

StatusOr<std::string> ComponentTypeOf(const Json& spec, const JsonReader& reader,
                                      const std::string& path) {
  TF_RETURN_IF_ERROR(reader.Object(spec, path));
  const Json* type = JsonReader::Find(spec, "type");
  if (type == nullptr) return reader.Error(path, "has no \"type\"");
  std::string out;
  TF_RETURN_IF_ERROR(reader.String(*type, path + ".type", &out));
  return out;
}

StatusOr<std::string> RequiredString(const Json& spec, const JsonReader& reader,
                                     const std::string& path, std::string_view key) {
  const std::string field = path + "." + std::string(key);
  const Json* value = JsonReader::Find(spec, key);
  if (value == nullptr) return reader.Error(field, "is missing");
  std::string out;
  TF_RETURN_IF_ERROR(reader.String(*value, field, &out));
  return out;
}

StatusOr<bool> OptionalBool(const Json& spec, const JsonReader& reader, const std::string& path,
                            std::string_view key, bool fallback) {
  const Json* value = JsonReader::Find(spec, key);
  if (value == nullptr) return fallback;
  bool out = fallback;
  TF_RETURN_IF_ERROR(reader.Bool(*value, path + "." + std::string(key), &out));
  return out;
}

StatusOr<const Json*> RequiredArray(const Json& spec, const JsonReader& reader,
                                    const std::string& path, std::string_view key) {
  const std::string field = path + "." + std::string(key);
  const Json* value = JsonReader::Find(spec, key);
  if (value == nullptr) return reader.Error(field, "is missing");
  if (!value->is_array()) return reader.TypeError(field, "an array", *value);
  return value;
}

StatusOr<HfPattern> ParseHfPattern(const Json& spec, const JsonReader& reader,
                                   const std::string& path) {
  const std::string field = path + ".pattern";
  const Json* pattern = JsonReader::Find(spec, "pattern");
  if (pattern == nullptr) return reader.Error(field, "is missing");
  if (!pattern->is_object() || pattern->size() != 1) {
    return reader.TypeError(field, "{\"String\": ...} or {\"Regex\": ...}", *pattern);
  }
  HfPattern out;
  if (const Json* literal = JsonReader::Find(*pattern, "String")) {
    TF_RETURN_IF_ERROR(reader.String(*literal, field + ".String", &out.literal));
    return out;
  }
  if (const Json* regex = JsonReader::Find(*pattern, "Regex")) {
    std::string text;
    TF_RETURN_IF_ERROR(reader.String(*regex, field + ".Regex", &text));
    TF_ASSIGN_OR_RETURN(RegexPattern compiled,
                        RegexPattern::Create(text, reader.label() + ": " + field + ".Regex"));
    out.regex = std::move(compiled);
    return out;
  }
  return reader.TypeError(field, "{\"String\": ...} or {\"Regex\": ...}", *pattern);
}

Status UnsupportedComponent(const JsonReader& reader, const std::string& path,
                            std::string_view kind, std::string_view type,
                            std::string_view supported) {
  return UnimplementedError(reader.label() + ": " + path + ": the " + std::string(kind) + " \"" +
                            std::string(type) +
                            "\" is not supported (tierflow reads: " + std::string(supported) + ")");
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  return *ReplaceAllWithin(text, from, to, std::numeric_limits<size_t>::max());
}

std::optional<std::string> ReplaceAllWithin(std::string_view text, std::string_view from,
                                            std::string_view to, size_t max_bytes) {
  std::string out;
  if (text.size() > max_bytes) return std::nullopt;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    // What is built so far, this replacement, and the rest at least.
    if (out.size() + (hit - pos) + to.size() + (text.size() - hit - from.size()) > max_bytes) {
      return std::nullopt;
    }
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace tierflow

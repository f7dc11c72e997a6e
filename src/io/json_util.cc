// Strict JSON parsing (duplicate keys rejected) and typed field reads.
#include "io/json_util.h"

#include <set>
#include <vector>

#include "common/path_component.h"
#include "common/printable.h"

namespace tierflow {

namespace {
// Thrown from the parse callback to stop at the first nesting level too deep.
struct TooDeep {
  int depth;
};
}  // namespace

Status ParseJsonStrict(std::string_view text, std::string_view what, nlohmann::json* out) {
  return ParseJson(text, what, JsonParseOptions{}, out);
}

Status ParseJson(std::string_view text, std::string_view what, const JsonParseOptions& options,
                 nlohmann::json* out) {
  using Json = nlohmann::json;
  // One key set and one name per object being parsed, innermost last.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> object_names;
  std::string last_key = "";
  std::string duplicate;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::array_start:
        if (depth >= options.max_depth) throw TooDeep{depth + 1};
        break;
      case Json::parse_event_t::object_start:
        if (depth >= options.max_depth) throw TooDeep{depth + 1};
        object_names.push_back(keys.empty() ? std::string() : last_key);
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) {
          keys.pop_back();
          object_names.pop_back();
        }
        break;
      case Json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (options.reject_duplicate_keys && !keys.empty() &&
            !keys.back().insert(last_key).second && duplicate.empty()) {
          duplicate = "key " + QuotedExcerpt(last_key) + " appears twice " +
                      (keys.size() == 1 ? std::string("at top level")
                                        : "inside " + QuotedExcerpt(object_names.back()));
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    *out = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       options.allow_comments);
  } catch (const TooDeep& e) {
    return DataLossError(std::string(what) + ": JSON nested deeper than " +
                         std::to_string(options.max_depth) +
                         " levels; no file tierflow reads nests that deep, so it is not one");
  } catch (const Json::parse_error& e) {
    // The byte offset locates the error in files without line structure (a
    // safetensors header, a minified index).
    return DataLossError(std::string(what) + ": not valid JSON (byte " + std::to_string(e.byte) +
                         ": " + e.what() + ")");
  } catch (const Json::exception& e) {
    return DataLossError(std::string(what) + ": not valid JSON (" + e.what() + ")");
  } catch (const std::exception& e) {
    return DataLossError(std::string(what) + ": could not be parsed (" + e.what() + ")");
  }
  if (!duplicate.empty()) return DataLossError(std::string(what) + ": " + duplicate);
  return Status::Ok();
}

std::string JsonExcerpt(const nlohmann::json& value, size_t max_chars) {
  using Json = nlohmann::json;
  auto plural = [](size_t n, const char* one) {
    return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
  };
  switch (value.type()) {
    case Json::value_t::array:
      return "an array of " + plural(value.size(), "element");
    case Json::value_t::object:
      return "an object with " + plural(value.size(), "key");
    case Json::value_t::string:
      return QuotedExcerpt(value.get_ref<const std::string&>(), max_chars);
    case Json::value_t::binary:
      return "binary data";
    default:
      try {
        return value.dump(-1, ' ', false, Json::error_handler_t::replace);
      } catch (...) {
        return "a value that cannot be shown";
      }
  }
}

namespace {

// A copy of `value` whose strings and keys are valid UTF-8. Recursive: the
// values a command prints are its own (shallow), never an outside document.
nlohmann::json WithValidUtf8(const nlohmann::json& value) {
  using Json = nlohmann::json;
  switch (value.type()) {
    case Json::value_t::string:
      return EscapeInvalidUtf8(value.get_ref<const std::string&>());
    case Json::value_t::array: {
      Json out = Json::array();
      for (const Json& v : value) out.push_back(WithValidUtf8(v));
      return out;
    }
    case Json::value_t::object: {
      Json out = Json::object();
      for (auto it = value.begin(); it != value.end(); ++it) {
        out[EscapeInvalidUtf8(it.key())] = WithValidUtf8(it.value());
      }
      return out;
    }
    default:
      return value;
  }
}

}  // namespace

std::string JsonOutput(const nlohmann::json& value, int indent) {
  // replace: a last guard; WithValidUtf8 leaves nothing for it to replace.
  return WithValidUtf8(value).dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// "FILE: a.b" + key: a field path inside a named file continues with '.',
// a bare file name starts one with ": ".
std::string FieldPath(std::string_view where, std::string_view key) {
  const bool inside = where.find(": ") != std::string_view::npos;
  return std::string(where) + (inside ? "." : ": ") + std::string(key);
}

// The field `key` of `obj`, or nullptr when it is missing (and optional).
StatusOr<const nlohmann::json*> FindJsonField(const nlohmann::json& obj, std::string_view key,
                                              std::string_view where, JsonField presence) {
  if (!obj.is_object()) {
    return DataLossError(std::string(where) + " must be an object, not " + JsonExcerpt(obj));
  }
  auto it = obj.find(std::string(key));
  if (it == obj.end()) {
    if (presence == JsonField::kOptional) return static_cast<const nlohmann::json*>(nullptr);
    return DataLossError(FieldPath(where, key) + " is missing");
  }
  return &*it;
}

Status WrongType(std::string_view where, std::string_view key, const char* want,
                 const nlohmann::json& got) {
  return DataLossError(FieldPath(where, key) + " must be " + want + ", not " + JsonExcerpt(got));
}

}  // namespace

Status GetJsonString(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     std::string* out, JsonField presence) {
  TF_ASSIGN_OR_RETURN(const nlohmann::json* v, FindJsonField(obj, key, where, presence));
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return WrongType(where, key, "a string", *v);
  *out = v->get_ref<const std::string&>();
  return Status::Ok();
}

Status GetJsonUint64(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     uint64_t* out, JsonField presence) {
  TF_ASSIGN_OR_RETURN(const nlohmann::json* v, FindJsonField(obj, key, where, presence));
  if (v == nullptr) return Status::Ok();
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    return WrongType(where, key, "a non-negative integer", *v);
  }
  return Status::Ok();
}

Status GetJsonInt64(const nlohmann::json& obj, std::string_view key, std::string_view where,
                    int64_t* out, JsonField presence) {
  TF_ASSIGN_OR_RETURN(const nlohmann::json* v, FindJsonField(obj, key, where, presence));
  if (v == nullptr) return Status::Ok();
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return WrongType(where, key, "an integer below 2^63", *v);
    }
    *out = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    *out = v->get<int64_t>();
  } else {
    return WrongType(where, key, "an integer", *v);
  }
  return Status::Ok();
}

Status GetJsonDouble(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     double* out, JsonField presence) {
  TF_ASSIGN_OR_RETURN(const nlohmann::json* v, FindJsonField(obj, key, where, presence));
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return WrongType(where, key, "a number", *v);
  *out = v->get<double>();
  return Status::Ok();
}

Status GetJsonArray(const nlohmann::json& obj, std::string_view key, std::string_view where,
                    const nlohmann::json** out, JsonField presence) {
  TF_ASSIGN_OR_RETURN(const nlohmann::json* v, FindJsonField(obj, key, where, presence));
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return WrongType(where, key, "an array", *v);
  *out = v;
  return Status::Ok();
}

Status GetJsonObject(const nlohmann::json& obj, std::string_view key, std::string_view where,
                     const nlohmann::json** out, JsonField presence) {
  TF_ASSIGN_OR_RETURN(const nlohmann::json* v, FindJsonField(obj, key, where, presence));
  if (v == nullptr) return Status::Ok();
  if (!v->is_object()) return WrongType(where, key, "an object", *v);
  *out = v;
  return Status::Ok();
}

}  // namespace tierflow

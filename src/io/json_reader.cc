// JsonReader: type and range checks before every nlohmann get<T>().
#include "io/json_reader.h"

#include <cmath>

#include "io/json_util.h"

namespace tierflow {
namespace {

std::string Describe(const nlohmann::json& v) { return JsonExcerpt(v, 60); }

std::string Range(int64_t min_value, int64_t max_value) {
  return "[" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
}

}  // namespace

Status JsonReader::Error(std::string_view path, std::string_view what) const {
  return InvalidArgumentError(label_ + ": " + std::string(path) + ": " + std::string(what));
}

Status JsonReader::TypeError(std::string_view path, std::string_view expected,
                             const nlohmann::json& v) const {
  return Error(path, "expected " + std::string(expected) + ", got " + Describe(v));
}

Status JsonReader::Number(const nlohmann::json& v, std::string_view path, double* out) const {
  if (!v.is_number()) return TypeError(path, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Error(path, "expected a finite number");
  *out = d;
  return Status::Ok();
}

Status JsonReader::PositiveNumber(const nlohmann::json& v, std::string_view path,
                                  double* out) const {
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
    return TypeError(path, "a positive number", v);
  }
  *out = v.get<double>();
  return Status::Ok();
}

Status JsonReader::Int(const nlohmann::json& v, std::string_view path, int64_t min_value,
                       int64_t max_value, int64_t* out) const {
  if (!v.is_number()) return TypeError(path, "an integer", v);
  int64_t i = 0;
  if (v.is_number_integer()) {
    // Compared as parsed: an unsigned above INT64_MAX would wrap in get<int64_t>().
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max_value)) {
      return Error(path,
                   "value " + Describe(v) + " is out of range " + Range(min_value, max_value));
    }
    i = v.get<int64_t>();
  } else {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) {
      return TypeError(path, "an integer", v);
    }
    i = static_cast<int64_t>(d);
  }
  if (i < min_value || i > max_value) {
    return Error(path,
                 "value " + std::to_string(i) + " is out of range " + Range(min_value, max_value));
  }
  *out = i;
  return Status::Ok();
}

Status JsonReader::Bool(const nlohmann::json& v, std::string_view path, bool* out) const {
  if (!v.is_boolean()) return TypeError(path, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status JsonReader::String(const nlohmann::json& v, std::string_view path, std::string* out) const {
  if (!v.is_string()) return TypeError(path, "a string", v);
  *out = v.get<std::string>();
  return Status::Ok();
}

Status JsonReader::StringList(const nlohmann::json& v, std::string_view path,
                              std::vector<std::string>* out) const {
  if (v.is_string()) {
    *out = {v.get<std::string>()};
    return Status::Ok();
  }
  if (!v.is_array()) return TypeError(path, "a string or an array of strings", v);
  std::vector<std::string> list;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      return TypeError(std::string(path) + "[" + std::to_string(i) + "]", "a string", v[i]);
    }
    list.push_back(v[i].get<std::string>());
  }
  *out = std::move(list);
  return Status::Ok();
}

Status JsonReader::Object(const nlohmann::json& v, std::string_view path) const {
  if (!v.is_object()) return TypeError(path, "an object ({...})", v);
  return Status::Ok();
}

const nlohmann::json* JsonReader::Find(const nlohmann::json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace tierflow

// Validation of outside names used as path components (see path_component.h).
#include "common/path_component.h"

#include <algorithm>
#include <cstdio>

namespace tierflow {

std::string QuotedExcerpt(std::string_view text, size_t max_bytes) {
  std::string out = "\"";
  const size_t n = std::min(text.size(), max_bytes);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (text.size() > max_bytes) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

StatusOr<PathComponent> PathComponent::Parse(std::string_view name, std::string_view what) {
  auto bad = [&](const char* why) {
    return InvalidArgumentError(std::string(what) + " " + QuotedExcerpt(name) +
                                " cannot be used as a file name: " + why);
  };
  if (name.empty()) return bad("it is empty");
  if (name == "." || name == "..") return bad("it names a directory itself");
  if (name.size() > kMaxBytes) return bad("it is longer than 255 bytes");
  if (name.front() == '.') return bad("it starts with '.'");
  for (char ch : name) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '/' || c == '\\') return bad("it contains a path separator");
    if (c < 0x20 || c == 0x7f) return bad("it contains a control character");
  }
  return PathComponent(std::string(name));
}

Status CheckAbsolutePath(std::string_view path, std::string_view what) {
  auto bad = [&](const char* why) {
    return InvalidArgumentError(std::string(what) + " " + QuotedExcerpt(path) +
                                " is not a usable absolute path: " + why);
  };
  if (path.empty() || path.front() != '/') return bad("it does not start with '/'");
  if (path.size() >= 4096) return bad("it is 4096 bytes or longer (PATH_MAX)");
  if (path.find('\0') != std::string_view::npos) return bad("it contains a NUL byte");
  for (size_t begin = 1; begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    const std::string_view part = path.substr(begin, end - begin);
    if (part == "." || part == "..") return bad("it has a '.' or '..' component");
    if (part.size() > PathComponent::kMaxBytes) return bad("a component is longer than 255 bytes");
    begin = end + 1;
  }
  return Status::Ok();
}

}  // namespace tierflow

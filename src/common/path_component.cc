// Validation of outside names used as path components (see path_component.h).
#include "common/path_component.h"

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

}  // namespace tierflow

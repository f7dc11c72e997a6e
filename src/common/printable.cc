// Escaping of invalid UTF-8 and control characters in outside text.
#include "common/printable.h"

#include <cstdint>
#include <cstdio>

namespace tierflow {
namespace {

// The length of the well-formed UTF-8 sequence at text[i], or 0 if the
// byte there does not start one (RFC 3629's table of well-formed sequences).
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

void AppendEscaped(unsigned char c, std::string* out) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\x%02x", c);
  *out += buf;
}

std::string Escape(std::string_view text, bool controls) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      AppendEscaped(static_cast<unsigned char>(text[i]), &out);
      ++i;
      continue;
    }
    if (controls) {
      const unsigned char c0 = static_cast<unsigned char>(text[i]);
      const bool c0_control = n == 1 && (c0 < 0x20 || c0 == 0x7f) && c0 != '\n' && c0 != '\t';
      // U+0080..U+009F: 0xC2 0x80..0x9F; escaped byte by byte.
      const bool c1_control =
          n == 2 && c0 == 0xC2 && static_cast<unsigned char>(text[i + 1]) <= 0x9F;
      if (c0_control || c1_control) {
        for (size_t k = 0; k < n; ++k) AppendEscaped(static_cast<unsigned char>(text[i + k]), &out);
        i += n;
        continue;
      }
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

std::string EscapeInvalidUtf8(std::string_view text) { return Escape(text, false); }

std::string PrintableText(std::string_view text) { return Escape(text, true); }

}  // namespace tierflow

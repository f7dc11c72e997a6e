// Code point classification by binary search over generated range tables.
#include "data/unicode_class.h"

#include <algorithm>
#include <iterator>

namespace tierflow::data_internal {
namespace {

struct CodePointRange {
  char32_t lo;
  char32_t hi;  // inclusive
};

#include "data/unicode_tables.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], char32_t cp) {
  // The first range whose end is >= cp is the only one that can hold it.
  const CodePointRange* it =
      std::lower_bound(std::begin(ranges), std::end(ranges), cp,
                       [](const CodePointRange& r, char32_t value) { return r.hi < value; });
  return it != std::end(ranges) && it->lo <= cp;
}

bool IsWhiteSpace(char32_t cp) {
  // Unicode's White_Space property (PropList.txt), complete.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace

CharClass ClassifyCodePoint(char32_t cp) {
  if (cp < 0x80) {  // the common case, without a table search
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::kLetter;
    if (cp >= '0' && cp <= '9') return CharClass::kNumber;
    if (IsWhiteSpace(cp)) return CharClass::kSpace;
    return CharClass::kOther;
  }
  if (IsWhiteSpace(cp)) return CharClass::kSpace;
  if (InRanges(kLetterRanges, cp)) return CharClass::kLetter;
  if (InRanges(kNumberRanges, cp)) return CharClass::kNumber;
  return CharClass::kOther;
}

int DecodeUtf8(std::string_view text, size_t pos, char32_t* cp) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  char32_t value;
  char32_t min_value;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min_value = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF where a sequence must start
  }
  if (pos + len > text.size()) return 0;
  for (int i = 1; i < len; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

size_t FindInvalidUtf8(std::string_view text) {
  char32_t cp;
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int len = DecodeUtf8(text, pos, &cp);
    if (len == 0) return pos;
    pos += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

size_t SkipSpaceForward(std::string_view text, size_t pos) {
  char32_t cp;
  while (pos < text.size()) {
    const int len = DecodeUtf8(text, pos, &cp);
    if (len == 0 || ClassifyCodePoint(cp) != CharClass::kSpace) break;
    pos += static_cast<size_t>(len);
  }
  return pos;
}

size_t SkipSpaceBackward(std::string_view text, size_t end) {
  char32_t cp;
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    const int len = DecodeUtf8(text, start, &cp);
    if (len == 0 || start + static_cast<size_t>(len) != end ||
        ClassifyCodePoint(cp) != CharClass::kSpace) {
      break;
    }
    end = start;
  }
  return end;
}

bool IsWordCodePoint(char32_t cp) {
  const CharClass c = ClassifyCodePoint(cp);
  return c == CharClass::kLetter || c == CharClass::kNumber || cp == U'_';
}

}  // namespace tierflow::data_internal

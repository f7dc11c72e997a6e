// The GPT-2 split regex as a left-to-right scan over decoded code points.
#include "data/gpt2_pretokenize.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "data/unicode_class.h"

namespace tierflow {
namespace {

using data_internal::CharClass;

struct CodePoint {
  char32_t value;
  CharClass cls;
  size_t offset_bytes;  // where it starts in the text
};

// The contraction alternatives 's 't 're 've 'm 'll 'd, tried at an apostrophe.
// Returns how many code points match (0 for none).
size_t MatchContraction(const std::vector<CodePoint>& cps, size_t i) {
  if (cps[i].value != U'\'' || i + 1 >= cps.size()) return 0;
  const char32_t a = cps[i + 1].value;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= cps.size()) return 0;
  const char32_t b = cps[i + 2].value;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

StatusOr<std::vector<std::string_view>> SplitGpt2Pieces(std::string_view text,
                                                        size_t base_offset_bytes) {
  std::vector<CodePoint> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const int len = data_internal::DecodeUtf8(text, pos, &cp);
    if (len == 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(text[pos]));
      return InvalidArgumentError("text is not valid UTF-8 at byte offset " +
                                  std::to_string(base_offset_bytes + pos) + " (byte " + hex +
                                  "); convert it to UTF-8 before training on it");
    }
    cps.push_back({cp, data_internal::ClassifyCodePoint(cp), pos});
    pos += static_cast<size_t>(len);
  }

  std::vector<std::string_view> pieces;
  const size_t n = cps.size();
  const auto piece = [&](size_t begin, size_t end) {
    const size_t b = cps[begin].offset_bytes;
    const size_t e = end < n ? cps[end].offset_bytes : text.size();
    pieces.push_back(text.substr(b, e - b));
  };
  size_t i = 0;
  while (i < n) {
    if (size_t len = MatchContraction(cps, i); len > 0) {
      piece(i, i + len);
      i += len;
      continue;
    }
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020 lead,
    // then a run of one class that is not whitespace.
    size_t start = i;
    size_t j = cps[i].value == U' ' ? i + 1 : i;
    if (j < n && cps[j].cls != CharClass::kSpace) {
      const CharClass cls = cps[j].cls;
      while (j < n && cps[j].cls == cls) ++j;
      piece(start, j);
      i = j;
      continue;
    }
    // Whitespace: "\s+(?!\S)" backtracks so the run never swallows the space
    // that precedes a non-space; a single such space falls through to "\s+".
    size_t k = i;
    while (k < n && cps[k].cls == CharClass::kSpace) ++k;
    if (k < n && k - i >= 2) k -= 1;
    piece(i, k);
    i = k;
  }
  return pieces;
}

}  // namespace tierflow

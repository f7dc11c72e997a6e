// The bytes_to_unicode() table and conversions through it.
#include "data/gpt2_byte_level.h"

#include <array>
#include <cstdio>

#include "data/unicode_class.h"

namespace tierflow {
namespace {

struct Alphabet {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 0x144> cp_to_byte{};  // the alphabet lies inside U+0000..U+0143
};

const Alphabet& GetAlphabet() {
  static const Alphabet alphabet = [] {
    Alphabet a;
    a.cp_to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp =
          printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next_extra++);
      a.byte_to_cp[b] = cp;
      a.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return alphabet;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

char32_t Gpt2ByteToCodePoint(uint8_t b) { return GetAlphabet().byte_to_cp[b]; }

int Gpt2CodePointToByte(char32_t cp) {
  const Alphabet& a = GetAlphabet();
  return cp < a.cp_to_byte.size() ? a.cp_to_byte[cp] : -1;
}

std::string Gpt2BytesToVocabText(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(Gpt2ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

StatusOr<std::string> Gpt2VocabTextToBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const int len = data_internal::DecodeUtf8(text, pos, &cp);
    if (len == 0)
      return InvalidArgumentError("not valid UTF-8 at byte offset " + std::to_string(pos));
    const int b = Gpt2CodePointToByte(cp);
    if (b < 0) {
      char name[16];
      std::snprintf(name, sizeof(name), "U+%04X", static_cast<unsigned>(cp));
      return InvalidArgumentError(std::string("has the character ") + name +
                                  ", which is not in GPT-2's byte-level alphabet");
    }
    out.push_back(static_cast<char>(b));
    pos += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace tierflow

// ByteTokenizer: bytes are tokens; "<|endoftext|>" <-> token 0.
#include "data/byte_tokenizer.h"

namespace tierflow {

StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kEndOfText.size(), kEndOfText) == 0) {
      tokens.push_back(kEndOfTextToken);
      i += kEndOfText.size();
      continue;
    }
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0) {
      return InvalidArgumentError(
          "text has a NUL byte at byte offset " + std::to_string(i) +
          "; the byte tokenizer uses NUL as its end-of-text token, so NUL cannot appear in text");
    }
    tokens.push_back(byte);
    ++i;
  }
  return tokens;
}

std::string ByteTokenizer::Decode(std::span<const int32_t> tokens) const {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t == kEndOfTextToken) {
      text += kEndOfText;
    } else if (t > 0 && t < kVocabSize) {
      text += static_cast<char>(static_cast<unsigned char>(t));
    } else {
      text += "\xEF\xBF\xBD";  // U+FFFD: not a token of this vocabulary
    }
  }
  return text;
}

}  // namespace tierflow

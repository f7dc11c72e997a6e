// ByteTokenizer: one token per byte, for the built-in tiny presets.
//
// The tiny presets (tiny-gpt2, tiny-llama) have a vocabulary of 256, so there
// is no room for a 257th token: the end-of-text token is byte 0 (NUL), which
// text never contains. Encode turns the literal "<|endoftext|>" into token 0
// and refuses text that holds a NUL byte (it would read as a document break);
// every other byte b is token b. vocab_size() is 256.
#pragma once

#include "data/tokenizer.h"

namespace tierflow {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 256;
  static constexpr int32_t kEndOfTextToken = 0;

  // Errors: InvalidArgument naming the byte offset of a NUL byte.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return kVocabSize; }
  int32_t eot_token() const override { return kEndOfTextToken; }
  std::string Describe() const override { return "byte (256 tokens, end-of-text = 0)"; }
};

}  // namespace tierflow

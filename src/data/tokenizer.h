// The Tokenizer interface the data pipeline tokenizes text with, and the
// factory `tierflow train --tokenizer` goes through.
//
// Two implementations: ByteTokenizer (one token per byte, for the built-in
// tiny presets, whose vocabulary is 256) and Gpt2BpeTokenizer (GPT-2's
// byte-level BPE from vocab.json + merges.txt or a tokenizer.json). Both
// treat the literal text "<|endoftext|>" as the end-of-text token, and both
// decode that token back to the same text, so Decode(Encode(s)) == s.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

// The largest real tokenizer files (tokenizer.json of large multilingual
// vocabularies) are tens of MB; a much larger file is a wrong path, refused
// by name by every loader.
inline constexpr size_t kMaxTokenizerFileBytes = size_t{256} << 20;

// The text of the end-of-text (document separator) token.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// Implementations are immutable after construction apart from internal
// caches, and are thread-safe: Encode and Decode may be called concurrently.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids, each in [0, vocab_size()). Errors: InvalidArgument when the
  // text cannot be tokenized (invalid UTF-8 for GPT-2 BPE, a NUL byte for the
  // byte tokenizer), naming the byte offset; the caller adds the file name.
  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // The bytes the tokens stand for. The end-of-text token decodes to
  // "<|endoftext|>"; an id outside the vocabulary decodes to U+FFFD.
  virtual std::string Decode(std::span<const int32_t> tokens) const = 0;
  // One more than the largest token id.
  virtual int32_t vocab_size() const = 0;
  // The document separator written before each JSONL document.
  virtual int32_t eot_token() const = 0;
  // Encode for text that continues a sequence (follows other tokens of it):
  // the same except where a tokenizer treats the start of a text specially
  // (Metaspace's prepend_scheme "first"). Default: Encode.
  virtual StatusOr<std::vector<int32_t>> EncodeContinuation(std::string_view text) const {
    return Encode(text);
  }
  // Encode plus the tokens the tokenizer adds around a text (Llama's BOS), as
  // Hugging Face's add_special_tokens=True. Default: Encode.
  virtual StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(std::string_view text) const {
    return Encode(text);
  }
  // The beginning/end-of-sequence tokens, where the tokenizer names them.
  virtual std::optional<int32_t> bos_token() const { return std::nullopt; }
  virtual std::optional<int32_t> eos_token() const { return std::nullopt; }
  // The Jinja chat template shipped with the tokenizer, or empty.
  virtual const std::string& chat_template() const;
  // The id of the token whose text is exactly `text` (an added/special token
  // or a vocabulary entry), if there is one.
  virtual std::optional<int32_t> TokenId(std::string_view text) const {
    (void)text;
    return std::nullopt;
  }
  // A short description for logs, e.g. "byte" or "gpt2-bpe (50257 tokens, /m/vocab.json)".
  virtual std::string Describe() const = 0;
};

// Loads the tokenizer `spec` names:
//   "byte"                  ByteTokenizer
//   a tokenizer.json file   HfTokenizer (with tokenizer_config.json beside it)
//   a tokenizer.model file  SentencePieceTokenizer (libsentencepiece)
//   a directory             its tokenizer.json if there is one, else
//                           tokenizer.model, else vocab.json + merges.txt,
//                           else encoder.json + vocab.bpe (OpenAI's names
//                           for GPT-2's files)
// Errors: NotFound naming what was looked for; the loaders' errors.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec);

}  // namespace tierflow

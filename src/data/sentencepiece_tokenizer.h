// SentencePieceTokenizer: a bare SentencePiece tokenizer.model (Llama 2,
// Mistral, TinyLlama as Meta and Mistral ship them), applied by Debian's
// libsentencepiece, the reference implementation.
//
// Encode is SentencePiece's EncodeAsIds (which prepends its dummy-prefix
// space when the model says so); special-token text such as "<s>" in the
// input is plain text to SentencePiece, as in Meta's own tokenizer. BOS/EOS
// are the model's bos_id/eos_id; the document separator is the BOS (the EOS
// for a model without one). Thread-safe (the processor is const after load).
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tierflow {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Errors: InvalidArgument naming the file when it is not a SentencePiece
  // model, or when it has neither a BOS nor an EOS piece; ErrnoStatus.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromFile(const std::string& path);
  ~SentencePieceTokenizer() override;

  // Errors: InvalidArgument naming the byte offset of invalid UTF-8.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eot_token() const override { return eot_token_; }
  std::optional<int32_t> bos_token() const override { return bos_; }
  std::optional<int32_t> eos_token() const override { return eos_; }
  std::optional<int32_t> TokenId(std::string_view text) const override;
  std::string Describe() const override;

 private:
  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string path_;
  int32_t vocab_size_ = 0;
  int32_t eot_token_ = -1;
  std::optional<int32_t> bos_;
  std::optional<int32_t> eos_;
};

}  // namespace tierflow

// HfTokenizer: a Hugging Face tokenizer.json (with its tokenizer_config.json)
// applied as the tokenizers library applies it, for the BPE tokenizers of the
// models tierflow trains: GPT-2, Llama 3, Qwen2 (byte-level BPE with a split
// regex, NFC for Qwen2) and Llama 2, TinyLlama, Mistral (SentencePiece-style
// BPE with byte fallback and a Prepend/Replace normalizer or a Metaspace
// pre-tokenizer).
//
// Encode, as tokenizers' encode(text, add_special_tokens=False):
//   1. added tokens with normalized = false are matched in the raw text;
//   2. each plain segment is normalized (hf_normalizer.h), and added tokens
//      with normalized = true are matched in it;
//   3. each remaining plain segment is pre-tokenized (hf_pre_tokenizer.h) and
//      each piece encoded by the BPE model (bpe_model.h).
// EncodeWithSpecialTokens adds the post-processor's tokens (Llama's BOS), as
// add_special_tokens=True does; tokenizer_config.json's add_bos_token /
// add_eos_token, where given, decide them instead (as LlamaTokenizerFast).
// Decode maps ids to token texts (added tokens as written) and runs the
// decoder (hf_decoder.h). Text round-trips: Decode(Encode(s)) == s for the
// configurations above.
//
// Document separator (eot_token): the BOS token where the tokenizer adds one
// (Llama), else "<|endoftext|>" where it exists (GPT-2, Qwen2), else the EOS
// token; a tokenizer with none of them is refused at load.
//
// Other model types (WordPiece, Unigram, WordLevel) and components outside
// the lists in the component headers are Unimplemented errors naming them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_model.h"
#include "data/hf_added_tokens.h"
#include "data/hf_decoder.h"
#include "data/hf_normalizer.h"
#include "data/hf_pre_tokenizer.h"
#include "data/hf_tokenizer_config.h"
#include "data/tokenizer.h"

namespace tierflow {

class HfTokenizer final : public Tokenizer {
 public:
  // `config` may be null (no tokenizer_config.json). `name` names the
  // tokenizer.json in errors.
  static StatusOr<std::unique_ptr<HfTokenizer>> Create(std::string_view tokenizer_json,
                                                       const std::string& name,
                                                       const HfTokenizerConfig* config);
  // Reads `path`, and tokenizer_config.json (and chat_template.jinja, which
  // overrides its chat template) beside it where present.
  static StatusOr<std::unique_ptr<HfTokenizer>> FromFile(const std::string& path);

  // Errors: InvalidArgument naming the byte offset of invalid UTF-8, or a
  // character the vocabulary cannot express.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  StatusOr<std::vector<int32_t>> EncodeContinuation(std::string_view text) const override;
  StatusOr<std::vector<int32_t>> EncodeWithSpecialTokens(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eot_token() const override { return eot_token_; }
  std::optional<int32_t> bos_token() const override { return bos_token_; }
  std::optional<int32_t> eos_token() const override { return eos_token_; }
  const std::string& chat_template() const override { return chat_template_; }
  std::optional<int32_t> TokenId(std::string_view text) const override;
  std::string Describe() const override;

 private:
  HfTokenizer() = default;
  StatusOr<std::vector<int32_t>> EncodeAt(std::string_view text, bool at_start) const;
  Status EncodePlain(std::string_view text, bool at_start, std::vector<int32_t>* out) const;

  std::string name_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<HfNormalizer> normalizer_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  std::unique_ptr<HfDecoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, std::string> added_text_;  // by id
  AddedTokenMatcher raw_matcher_;                        // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;                 // the others
  std::vector<int32_t> prefix_;                          // post-processor tokens before the text
  std::vector<int32_t> suffix_;                          // and after
  std::optional<int32_t> bos_token_;
  std::optional<int32_t> eos_token_;
  std::string chat_template_;
  int32_t vocab_size_ = 0;
  int32_t eot_token_ = -1;
};

}  // namespace tierflow

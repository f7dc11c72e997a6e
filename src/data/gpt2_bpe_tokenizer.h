// Gpt2BpeTokenizer: GPT-2's byte-level BPE, loaded from vocab.json +
// merges.txt (OpenAI names them encoder.json + vocab.bpe). A tokenizer.json
// (GPT-2's included) is read by HfTokenizer (hf_tokenizer.h).
//
// Encoding is GPT-2's: split the text into pieces with the GPT-2 regex
// (gpt2_pretokenize.h), start each piece as one token per byte, then apply
// merges lowest rank first, every occurrence of the chosen pair left to right,
// until no adjacent pair has a merge. The literal "<|endoftext|>" is the
// end-of-text token (as Hugging Face's GPT-2 tokenizer treats it); no other
// special-token text is recognised. Pieces' encodings are cached.
//
// A vocabulary must hold all 256 single-byte tokens (so any text encodes),
// "<|endoftext|>", and every token a merge produces; ids must be distinct and
// non-negative. Malformed files are InvalidArgument errors naming the file and
// the line (merges.txt) or entry.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace tierflow {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // A token: its id and raw bytes (not the byte-level text of vocab.json).
  struct Token {
    std::string bytes;
    int64_t id = 0;
  };
  // A merge of two tokens (raw bytes) into their concatenation; its rank is
  // its position in the list. `where` names it in errors ("merges.txt line 7").
  struct Merge {
    std::string left;
    std::string right;
    std::string where;
  };

  // Validates and builds. `source` names the vocabulary in errors.
  static StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Create(std::vector<Token> vocab,
                                                            std::vector<Merge> merges,
                                                            std::string source);
  // OpenAI / Hugging Face slow-tokenizer files.
  static StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> FromVocabAndMerges(
      const std::string& vocab_json_path, const std::string& merges_txt_path);
  // The same from file contents; the names are used in errors.
  static StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> FromVocabAndMergesText(
      std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
      const std::string& merges_name);
  // Errors: InvalidArgument when `text` is not valid UTF-8 (byte offset named).
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t eot_token() const override { return eot_token_; }
  std::string Describe() const override;

  // Encodes one pre-tokenized piece with BPE only (no split, no special
  // tokens). Exposed for tests.
  std::vector<int32_t> EncodePiece(std::string_view piece) const;
  int64_t num_merges() const { return static_cast<int64_t>(merges_.size()); }

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t merged;
  };
  Gpt2BpeTokenizer() = default;
  std::vector<int32_t> Bpe(std::string_view piece) const;

  std::string source_;
  std::vector<std::string> token_bytes_;  // by id; empty where an id is unused
  std::vector<bool> token_used_;
  std::array<int32_t, 256> byte_token_{};
  std::unordered_map<uint64_t, MergeInfo> merges_;  // key: left id << 32 | right id
  int32_t eot_token_ = -1;

  static constexpr size_t kMaxCacheEntries = 1 << 17;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // guarded by cache_mu_
};

}  // namespace tierflow

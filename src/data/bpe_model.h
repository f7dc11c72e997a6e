// BpeModel: tokenizer.json's BPE model, applied as Hugging Face's tokenizers
// applies it to one pre-tokenized piece.
//
// A piece (text in the vocabulary's alphabet: byte-level characters for
// GPT-2/Llama 3/Qwen2, "▁"-for-space text for SentencePiece conversions) is
// encoded as follows:
//   1. ignore_merges (Llama 3): a piece that is itself a token is that token.
//   2. Each character is its token. A character the vocabulary lacks becomes
//      its UTF-8 bytes' "<0xXX>" tokens when byte_fallback is on and all
//      exist, else the unk token (consecutive unks fuse into one with
//      fuse_unk). With neither, the piece is refused (tokenizers drops such
//      characters silently; tierflow never loses text unannounced).
//   3. Merges: repeatedly the adjacent pair with the lowest merge rank, the
//      leftmost of equals, is merged (tokenizers' word.rs merge_all).
// Pieces' encodings are cached (bounded). Thread-safe.
//
// SentencePiece-style models see whole texts as one piece (no
// pre-tokenizer). When the vocabulary has "▁" and no token holds "▁" after
// another character, no merge can join a word to the "▁" that starts the next
// one, so such a piece is encoded word by word ("▁the", "▁cat", ...) with the
// same result, and each word is cached: long texts cost linear time.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

class BpeModel {
 public:
  struct Options {
    std::optional<std::string> unk_token;
    bool byte_fallback = false;
    bool fuse_unk = false;
    bool ignore_merges = false;
  };

  // `vocab`: token text -> id; `merges`: pairs of token texts, rank = index.
  // `source` names the file in errors. Errors: InvalidArgument for an empty
  // vocabulary, a negative or duplicated id, ids far sparser than the
  // vocabulary (see kMaxIdHoles), a merge whose parts or result are not
  // tokens, or an unk_token that is not one.
  static StatusOr<std::unique_ptr<BpeModel>> Create(
      const std::vector<std::pair<std::string, int64_t>>& vocab,
      std::vector<std::pair<std::string, std::string>> merges, Options options, std::string source);

  // Reads tokenizer.json's "model" object (type BPE). Errors as Create, plus
  // InvalidArgument for malformed fields and Unimplemented for dropout,
  // continuing_subword_prefix and end_of_word_suffix, which no model tierflow
  // trains uses.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model,
                                                      const JsonReader& reader);

  // Appends the tokens of `piece` to `out`. Errors: InvalidArgument naming a
  // character the vocabulary cannot express (see above).
  Status Encode(std::string_view piece, std::vector<int32_t>* out) const;

  // One more than the largest id.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // The token's text, or nullptr for an unused id.
  const std::string* TokenText(int32_t id) const;
  std::optional<int32_t> TokenId(std::string_view text) const;
  int64_t num_merges() const { return num_merges_; }
  bool byte_fallback() const { return options_.byte_fallback; }

 private:
  BpeModel() = default;
  Status Tokenize(std::string_view piece, std::vector<int32_t>* out) const;
  // Encode without the word split: cached when short.
  Status EncodeWord(std::string_view piece, std::vector<int32_t>* out) const;

  struct MergeInfo {
    int32_t rank;
    int32_t merged;
  };
  Options options_;
  std::string source_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_used_;
  std::unordered_map<uint64_t, MergeInfo> merges_;  // key: left id << 32 | right id
  std::array<int32_t, 256> byte_tokens_{};          // "<0xXX>" ids, -1 where missing
  int32_t unk_id_ = -1;
  int64_t num_merges_ = 0;
  bool split_at_metaspace_ = false;  // see above

  // The piece cache, in shards so that threads encoding at once seldom wait
  // for each other's lock.
  static constexpr size_t kCacheShards = 32;
  static constexpr size_t kMaxCacheEntriesPerShard = (size_t{1} << 17) / kCacheShards;
  static constexpr size_t kMaxCachedPieceBytes = 256;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;  // guarded by mu
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace tierflow

// tokenizer.json's "added_tokens": tokens matched in the text before it is
// split, and never merged with their neighbours (special tokens such as
// <|eot_id|>, <s>, <|im_start|>).
//
// Matching is Hugging Face's: leftmost-longest over all added tokens of a set;
// a single_word token matches only where no word character (letter, number,
// '_') touches it; lstrip/rstrip tokens swallow the white space on their
// left/right. Tokens with normalized = false are matched in the raw text,
// the others in the normalized text (hf_tokenizer.h). Matching takes time
// linear in the text whatever the number of added tokens (longest_match.h),
// as Hugging Face's Aho-Corasick matcher does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/longest_match.h"
#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// Errors: InvalidArgument naming the entry (missing id/content, an id out of
// range, empty content, a content or id given twice).
StatusOr<std::vector<AddedToken>> ParseHfAddedTokens(const nlohmann::json* list,
                                                     const JsonReader& reader);

// A piece of text after matching: an added token (token >= 0; [begin, end)
// includes any white space it stripped) or plain text (token == -1).
struct TextSegment {
  size_t begin = 0;
  size_t end = 0;
  int32_t token = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Cuts `text` (valid UTF-8) into segments covering it in order; plain
  // segments are non-empty. At each position the longest token starting
  // there is the candidate; where its single_word condition fails, the
  // position is plain text. `steps`, when not null, receives the matching
  // automaton's steps (at most 2 * text.size()).
  std::vector<TextSegment> Split(std::string_view text, uint64_t* steps = nullptr) const;
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<AddedToken> tokens_;
  LongestMatchFinder finder_;  // over the tokens' contents, indexed as tokens_
};

}  // namespace tierflow

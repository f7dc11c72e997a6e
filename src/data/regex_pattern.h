// RegexPattern: a compiled Unicode regular expression (PCRE2, UTF + UCP, JIT
// where available) for tokenizer.json's Split pre-tokenizer and Replace
// normalizer.
//
// Hugging Face's tokenizers compile these patterns with Oniguruma; PCRE2 reads
// the same syntax for everything the released tokenizers use (\p{L}, \p{N},
// (?i:...), look-ahead, possessive-free alternations). With UCP, \s is
// Unicode space (property Z, tab, LF, VT, FF, CR); Oniguruma's also matches
// U+0085 (NEL), which real text almost never holds.
//
// Immutable after Create and thread-safe: each match uses per-thread match
// data.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

class RegexPattern {
 public:
  // Errors: InvalidArgument naming `where` (e.g. "tokenizer.json
  // pre_tokenizer.pretokenizers[0].pattern"), the pattern's offset and
  // PCRE2's message.
  static StatusOr<RegexPattern> Create(std::string_view pattern, const std::string& where);

  // The non-empty, non-overlapping matches in `text` from the left, as
  // [begin, end) byte ranges. REQUIRES: `text` is valid UTF-8 (the caller
  // checks). Errors: Internal when PCRE2 fails mid-match (resource limits),
  // naming the pattern.
  StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> code_;
  std::string pattern_;
};

}  // namespace tierflow

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
// Bounded matching. Patterns come from outside files, and a backtracking
// matcher (PCRE2 here, Oniguruma in Hugging Face's library) takes time
// quadratic or exponential in the text for some of them: "(?=a*c)a|." rescans
// the rest of a run of a's at every character, "(?:a|aa)*c" tries every way to
// cut the run. So FindAll bounds the work of matching one text, and the bound
// is deterministic (the same text and pattern pass or fail on every machine
// and every run), not a clock:
//   - The pattern is compiled with automatic callouts: PCRE2 calls back before
//     every item of the pattern it tries. Each callout costs 1 plus the
//     distance the match position moved since the previous one (forward or
//     back), plus the longest scan an item can make and fail without another
//     callout (a counted repeat x{m,} fails after at most m - 1 characters:
//     the largest such m in the pattern, 1 for the released patterns).
//     Every character PCRE2 examines is thereby paid for, in a look-ahead, a
//     repeat that fails after scanning, or a backtrack alike.
//   - One FindAll may spend kRegexWorkPerByte per byte of its text plus
//     kRegexWorkFloor. The released pre-tokenizer patterns (GPT-2, Llama 3,
//     Qwen2, DeepSeek V3) spend at most 13 per byte on any text we tried,
//     including a megabyte of one letter, digit, space or newline
//     (tests/data/regex_pattern_test.cc): 5 times headroom. A pattern that
//     re-examines the text ends within about a second per megabyte.
//   - Back references (\1, \k<name>) are refused when the file is loaded: a
//     back reference compares a captured string without callouts, so its work
//     cannot be paid for, and no released tokenizer uses one.
//   - Backtracking memory is bounded too: the JIT stack grows to
//     kRegexJitStackBytes and the interpreter's frames (where JIT is not
//     available) to kRegexHeapBytes.
// Each bound ends in InvalidArgument naming the file and field, the pattern,
// what was exceeded and what to do.
//
// Immutable after Create and thread-safe: each match uses per-thread match
// data, match context and JIT stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

inline constexpr uint64_t kRegexWorkPerByte = 64;
inline constexpr uint64_t kRegexWorkFloor = uint64_t{1} << 20;
inline constexpr size_t kRegexJitStackBytes = size_t{64} << 20;
inline constexpr size_t kRegexHeapBytes = size_t{256} << 20;

class RegexPattern {
 public:
  // `where` names the pattern in every error, e.g. "tokenizer.json:
  // pre_tokenizer.pretokenizers[0].pattern.Regex". Errors: InvalidArgument
  // naming `where`, the pattern's offset and PCRE2's message; or a pattern
  // with a back reference.
  static StatusOr<RegexPattern> Create(std::string_view pattern, const std::string& where);

  // The non-empty, non-overlapping matches in `text` from the left, as
  // [begin, end) byte ranges. REQUIRES: `text` is valid UTF-8 (the caller
  // checks). `work`, when not null, receives the work spent (as above), also
  // when the bound is exceeded. Errors: InvalidArgument when the work or
  // memory bound is exceeded (above); Internal for any other PCRE2 failure.
  StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view text,
                                                           uint64_t* work = nullptr) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  // The error for PCRE2's code `rc` on a text of `text_bytes`.
  Status MatchError(int rc, size_t text_bytes, bool work_exceeded) const;

  std::shared_ptr<const Compiled> code_;
  std::string pattern_;
  std::string where_;
  uint64_t item_scan_ = 1;  // the longest scan an item can fail after, uncounted
};

}  // namespace tierflow

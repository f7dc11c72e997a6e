// RegexPattern over PCRE2's 8-bit library, with the work bound of
// regex_pattern.h kept by an automatic-callout function.
#include "data/regex_pattern.h"

#include <algorithm>
#include <limits>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/path_component.h"

namespace tierflow {

struct RegexPattern::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

std::string PcreMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Per thread, for every pattern: the match data (only the whole match, pair 0,
// is read, so one pair is enough whatever the pattern's groups), and a match
// context holding the limits and a JIT stack that grows to kRegexJitStackBytes
// (PCRE2's default, 32 KiB on the machine stack, ends a lazy repeat over a few
// thousand characters with "JIT stack limit reached").
struct ThreadMatcher {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, kRegexJitStackBytes, nullptr);
  ThreadMatcher() {
    // The work bound (callouts) limits time; PCRE2's own match limit would
    // also stop legitimate patterns on long runs (Llama 3's \s*[\r\n]+ counts
    // one step per space of a run), so it is lifted. The depth limit stays at
    // its default: the heap limit below bounds the same frames.
    pcre2_set_match_limit(context, std::numeric_limits<uint32_t>::max());
    pcre2_set_heap_limit(context, static_cast<uint32_t>(kRegexHeapBytes >> 10));  // KiB
    if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatcher() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  bool ok() const { return data != nullptr && context != nullptr; }
};

ThreadMatcher& ThisThreadMatcher() {
  thread_local ThreadMatcher matcher;
  return matcher;
}

// The work account of one FindAll (regex_pattern.h).
struct WorkAccount {
  uint64_t spent = 0;
  uint64_t budget = 0;
  uint64_t item_scan = 1;  // charged per callout on top of the move
  size_t position = 0;     // the match position at the previous callout
  bool exceeded = false;
};

int ChargeCallout(pcre2_callout_block* block, void* data) {
  auto* account = static_cast<WorkAccount*>(data);
  const size_t at = block->current_position;
  const size_t moved = at > account->position ? at - account->position : account->position - at;
  account->position = at;
  account->spent += account->item_scan + moved;
  if (account->spent > account->budget) {
    account->exceeded = true;
    return PCRE2_ERROR_CALLOUT;  // abandons the match with this code
  }
  return 0;
}

// The largest minimum count m of a quantifier {m}, {m,} or {m,n} in `pattern`
// (1 when none is larger): a single-character repeat examines fewer than m
// characters when it fails, and does so without a callout. Braces of escapes (\x{...}, \p{...},
// \N{...}, ...) are skipped; anything else that looks like a count (inside a
// class or \Q...\E) is counted too, which only makes the charge larger.
uint64_t LargestRepeatCount(std::string_view pattern) {
  uint64_t largest = 1;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (i + 2 < pattern.size() &&
          std::string_view("xopPNgk").find(pattern[i + 1]) != std::string_view::npos &&
          pattern[i + 2] == '{') {
        const size_t close = pattern.find('}', i + 3);
        if (close == std::string_view::npos) break;
        i = close;
      } else {
        ++i;
      }
      continue;
    }
    if (pattern[i] != '{') continue;
    uint64_t count = 0;
    size_t j = i + 1;
    while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && count < (1u << 20)) {
      count = count * 10 + static_cast<uint64_t>(pattern[j] - '0');
      ++j;
    }
    if (j > i + 1) largest = std::max(largest, count);
  }
  return largest;
}

// Every match of `code` in `text` into `out`; 0, or PCRE2's error code.
int MatchAll(const pcre2_code* code, std::string_view text, ThreadMatcher& matcher,
             WorkAccount* account, std::vector<std::pair<size_t, size_t>>* out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // A search that skips ahead to its first attempt pays for the skip.
    account->position = start;
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, matcher.data,
                               matcher.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return rc;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(matcher.data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      out->emplace_back(begin, end);
      start = end;
    } else {
      // An empty match: step over one whole character and search again.
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return 0;
}

}  // namespace

StatusOr<RegexPattern> RegexPattern::Create(std::string_view pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_AUTO_CALLOUT, &error,
                    &offset, nullptr);
  if (code == nullptr) {
    return InvalidArgumentError(where + ": the regex does not compile at offset " +
                                std::to_string(offset) + ": " + PcreMessage(error));
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  uint32_t backrefs = 0;
  if (pcre2_pattern_info(code, PCRE2_INFO_BACKREFMAX, &backrefs) == 0 && backrefs > 0) {
    return InvalidArgumentError(
        where + ": the regex " + QuotedExcerpt(pattern, 120) +
        " uses a back reference, which tierflow does not run: its matching work cannot be "
        "bounded (regex_pattern.h), and no released tokenizer uses one; rewrite the pattern "
        "without \\1, \\g{...}, \\k<...> or (?P=...)");
  }
  // JIT is an optimization: where it is unavailable the interpreter matches
  // the same strings, with the same callouts.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  RegexPattern out;
  out.code_ = std::move(compiled);
  out.pattern_ = std::string(pattern);
  out.where_ = where;
  out.item_scan_ = LargestRepeatCount(pattern);
  return out;
}

StatusOr<std::vector<std::pair<size_t, size_t>>> RegexPattern::FindAll(std::string_view text,
                                                                       uint64_t* work) const {
  ThreadMatcher& matcher = ThisThreadMatcher();
  if (!matcher.ok()) return OutOfMemoryError("no memory for PCRE2's match data");
  WorkAccount account;
  account.budget = kRegexWorkPerByte * text.size() + kRegexWorkFloor;
  account.item_scan = item_scan_;
  pcre2_set_callout(matcher.context, ChargeCallout, &account);
  std::vector<std::pair<size_t, size_t>> out;
  const int rc = MatchAll(code_->code, text, matcher, &account, &out);
  if (work != nullptr) *work = account.spent;
  if (rc < 0) return MatchError(rc, text.size(), account.exceeded);
  return out;
}

Status RegexPattern::MatchError(int rc, size_t text_bytes, bool work_exceeded) const {
  const std::string head = where_ + ": the regex " + QuotedExcerpt(pattern_, 120);
  const std::string size = std::to_string(text_bytes) + "-byte text";
  if (work_exceeded) {
    return InvalidArgumentError(
        head + " needs more than " + std::to_string(kRegexWorkPerByte) +
        " steps of matching work per byte (plus " + std::to_string(kRegexWorkFloor) + ") on a " +
        size +
        ": it examines the same text over and over (an unbounded repeat inside a look-ahead, "
        "or one that scans far and fails, tried at every character) or backtracks "
        "exponentially (nested or overlapping repeats); the released tokenizers' patterns "
        "need a few steps per byte. Rewrite the pattern so that each character is examined a "
        "bounded number of times");
  }
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
      rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_NOMEMORY) {
    const size_t limit = rc == PCRE2_ERROR_JIT_STACKLIMIT ? kRegexJitStackBytes : kRegexHeapBytes;
    return InvalidArgumentError(
        head + " needs more than " + std::to_string(limit >> 20) +
        " MiB of backtracking memory on a " + size + " (" + PcreMessage(rc) +
        "): it nests backtracking points as deep as a long run of the text (a lazy or "
        "group repeat such as (?:a|aa)*? over the run); rewrite the pattern so that its repeats "
        "are of single characters or classes, or possessive");
  }
  return InternalError(head + " failed on a " + size + ": " + PcreMessage(rc));
}

}  // namespace tierflow

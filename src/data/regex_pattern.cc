// RegexPattern over PCRE2's 8-bit library.
#include "data/regex_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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

// One match-data block per thread, for every pattern: only the whole match
// (pair 0) is read, so one pair is enough whatever the pattern's groups.
pcre2_match_data* ThreadMatchData() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

StatusOr<RegexPattern> RegexPattern::Create(std::string_view pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    return InvalidArgumentError(where + ": the regex does not compile at offset " +
                                std::to_string(offset) + ": " + PcreMessage(error));
  }
  // JIT is an optimization: where it is unavailable the interpreter matches
  // the same strings.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  RegexPattern out;
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  out.code_ = std::move(compiled);
  out.pattern_ = std::string(pattern);
  return out;
}

StatusOr<std::vector<std::pair<size_t, size_t>>> RegexPattern::FindAll(
    std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* data = ThreadMatchData();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    const int rc =
        pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return InternalError("regex \"" + pattern_ + "\" failed: " + PcreMessage(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {
      // An empty match: step over one whole character and search again.
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return out;
}

}  // namespace tierflow

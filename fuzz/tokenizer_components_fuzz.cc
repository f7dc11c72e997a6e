// Fuzz entry points for tokenizer.json's components, each fed a component's
// JSON and a text to run it on: the input is the JSON, a NUL byte, then the
// text (cut at its first invalid UTF-8 byte, as the tokenizer refuses such
// text before any component sees it). Besides crashes, the fuzzers look for
// inputs that run long (scripts/fuzz.sh passes -timeout) and check the bounds
// of issue #40: text growth (text_growth.h), regex work (regex_pattern.h) and
// linear added-token matching (longest_match.h).
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/hf_added_tokens.h"
#include "data/hf_normalizer.h"
#include "data/hf_pre_tokenizer.h"
#include "data/unicode_class.h"
#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "io/json_reader.h"
#include "io/json_util.h"

namespace tierflow::fuzz {
namespace {

constexpr std::string_view kLabel = "fuzz/tokenizer.json";

struct Input {
  nlohmann::json spec;
  std::string text;
};

// The component's JSON and the text, or false when the JSON does not parse
// (the tokenizer's own parser is fuzzed by fuzz_tokenizer_json).
bool SplitInput(std::string_view data, Input* out) {
  const size_t nul = data.find('\0');
  const std::string_view json = data.substr(0, nul);
  std::string_view text = nul == std::string_view::npos ? "" : data.substr(nul + 1);
  text = text.substr(0, data_internal::FindInvalidUtf8(text));
  JsonParseOptions options;
  options.reject_duplicate_keys = false;  // as HfTokenizer::Create reads
  if (!ParseJson(json, kLabel, options, &out->spec).ok()) return false;
  out->text = std::string(text);
  return true;
}

bool IsValidUtf8(std::string_view s) {
  return data_internal::FindInvalidUtf8(s) == std::string_view::npos;
}

}  // namespace

void FuzzHfNormalizer(std::string_view data) {
  Input in;
  if (!SplitInput(data, &in)) return;
  const JsonReader reader{std::string(kLabel)};
  StatusOr<std::unique_ptr<HfNormalizer>> normalizer =
      ParseHfNormalizer(&in.spec, reader, "normalizer");
  if (!normalizer.ok()) {
    FUZZ_CHECK(!normalizer.status().message().empty());
    return;
  }
  FUZZ_CHECK(*normalizer != nullptr);  // the spec is not null
  const GrowthLimit limit = GrowthLimit::For(in.text.size());
  StatusOr<std::string> out = (*normalizer)->Apply(in.text);
  if (!out.ok()) {
    FUZZ_CHECK(out.status().code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(out.status().message().find(kLabel) != std::string::npos);
    return;
  }
  FUZZ_CHECK(out->size() <= limit.max_bytes);
  FUZZ_CHECK(IsValidUtf8(*out));
}

void FuzzHfPreTokenizer(std::string_view data) {
  Input in;
  if (!SplitInput(data, &in)) return;
  const JsonReader reader{std::string(kLabel)};
  StatusOr<std::unique_ptr<HfPreTokenizer>> pre =
      ParseHfPreTokenizer(&in.spec, reader, "pre_tokenizer");
  if (!pre.ok()) {
    FUZZ_CHECK(!pre.status().message().empty());
    return;
  }
  FUZZ_CHECK(*pre != nullptr);
  const GrowthLimit limit = GrowthLimit::For(in.text.size());
  std::vector<TextPiece> pieces{{in.text, true}};
  const Status applied = (*pre)->Apply(&pieces, limit);
  if (!applied.ok()) {
    FUZZ_CHECK(applied.code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(applied.message().find(kLabel) != std::string::npos);
    return;
  }
  size_t total_bytes = 0;
  for (const TextPiece& p : pieces) {
    FUZZ_CHECK(!p.text.empty());
    FUZZ_CHECK(IsValidUtf8(p.text));
    total_bytes += p.text.size();
  }
  FUZZ_CHECK(total_bytes <= limit.max_bytes);
}

void FuzzHfAddedTokens(std::string_view data) {
  Input in;
  if (!SplitInput(data, &in)) return;
  const JsonReader reader{std::string(kLabel)};
  StatusOr<std::vector<AddedToken>> tokens = ParseHfAddedTokens(&in.spec, reader);
  if (!tokens.ok()) {
    FUZZ_CHECK(!tokens.status().message().empty());
    return;
  }
  std::unordered_map<int32_t, const AddedToken*> by_id;
  for (const AddedToken& t : *tokens) {
    FUZZ_CHECK(!t.content.empty());
    by_id[t.id] = &t;
  }
  const AddedTokenMatcher matcher(*tokens);
  uint64_t steps = 0;
  const std::vector<TextSegment> segments = matcher.Split(in.text, &steps);
  FUZZ_CHECK(steps <= 2 * in.text.size());
  // The segments tile the text; plain ones are non-empty, and a token's
  // segment holds its content (with the white space it stripped around it).
  size_t at = 0;
  for (const TextSegment& s : segments) {
    FUZZ_CHECK(s.begin == at && s.end > s.begin && s.end <= in.text.size());
    if (s.token >= 0) {
      const auto token = by_id.find(s.token);
      FUZZ_CHECK(token != by_id.end());
      const std::string_view seg(in.text.data() + s.begin, s.end - s.begin);
      FUZZ_CHECK(seg.find(token->second->content) != std::string_view::npos);
    }
    at = s.end;
  }
  FUZZ_CHECK(at == in.text.size());
}

}  // namespace tierflow::fuzz

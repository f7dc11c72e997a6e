// RegexPattern's work bound (regex_pattern.h): the released pre-tokenizer
// patterns stay far inside it on ordinary and adversarial-but-legal text,
// crafted patterns that rescan or backtrack end with an error naming the
// pattern, and the work counted is the same on every run.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/regex_pattern.h"

namespace tierflow {
namespace {

// The released Split patterns (tokenizer.json pre_tokenizer) of GPT-2 style
// byte-level BPE, Llama 3, Qwen2 and DeepSeek V3.
const std::vector<std::string>& ReleasedPatterns() {
  static const std::vector<std::string> patterns = {
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
  };
  return patterns;
}

std::string Repeat(std::string_view unit, size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += unit;
  s.resize(bytes - bytes % unit.size());
  return s;
}

TEST(RegexPattern, ReleasedPatternsStayFarInsideTheWorkBound) {
  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<std::string> texts = {
      Repeat("a", kMiB),           Repeat("7", kMiB),         Repeat(" ", kMiB),
      Repeat("\n", kMiB / 4),      Repeat("\r\n", kMiB / 4),  Repeat(" \n", kMiB / 4),
      Repeat("  \n ", kMiB / 4),   Repeat("!", kMiB / 4),     Repeat("'s", kMiB / 4),
      Repeat(" x", kMiB / 4),      Repeat("\t \t", kMiB / 4), Repeat("\xE4\xB8\xAD", kMiB / 4),
      Repeat(" ", kMiB / 4) + "a",
  };
  std::mt19937 rng(3);
  const char* pieces[] = {"a", " ", "\n", "'", "1", "\r", "\xC3\xA9", "!", "  ", "\t", "s"};
  std::string mixed;
  while (mixed.size() < kMiB / 4) mixed += pieces[rng() % 11];
  texts.push_back(mixed);
  for (const std::string& pattern : ReleasedPatterns()) {
    auto re = RegexPattern::Create(pattern, "test");
    ASSERT_TRUE(re.ok()) << re.status().ToString();
    for (const std::string& text : texts) {
      SCOPED_TRACE(pattern + " on " + std::to_string(text.size()) + " bytes of \"" +
                   text.substr(0, 4) + "...\"");
      uint64_t work = 0;
      auto matches = re->FindAll(text, &work);
      ASSERT_TRUE(matches.ok()) << matches.status().ToString();
      // Four times headroom (they need at most 13 per byte).
      EXPECT_LE(work, text.size() * kRegexWorkPerByte / 4);
    }
  }
}

// Variants of the findings' patterns (rescanning look-ahead, a repeat that
// scans and fails, nested and overlapping repeats, a long counted repeat
// that fails inside): each ends with the work error, naming the pattern.
TEST(RegexPattern, CraftedPatternsEndWithTheWorkBoundError) {
  const std::string run(256 << 10, 'a');
  struct Case {
    std::string pattern;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"(?=a*c)a|.", run},
      {"(?!a*c)a|.", run},
      {"(?:(?=a*c)a|.)+", run},
      {"a*c|.", run},
      {"[^c]*c|.", Repeat("ab", run.size())},
      {".*c|.", run},
      {"(?:a|aa)*?c|.", run},
      {"(?:a+)+c|.", run},
      {"\\s*\\s*\\s*c|.", std::string(run.size(), ' ')},
      {"(?:a{60000}|.)", Repeat(std::string(59999, 'a') + "x", run.size())},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern);
    auto re = RegexPattern::Create(c.pattern, "test.json: pre_tokenizer.pattern.Regex");
    ASSERT_TRUE(re.ok()) << re.status().ToString();
    uint64_t work = 0;
    auto matches = re->FindAll(c.text, &work);
    ASSERT_FALSE(matches.ok());
    EXPECT_EQ(matches.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(matches.status().message().find("test.json: pre_tokenizer.pattern.Regex: the regex"),
              std::string::npos)
        << matches.status().message();
    EXPECT_NE(matches.status().message().find("steps of matching work per byte"), std::string::npos)
        << matches.status().message();
    EXPECT_GT(work, kRegexWorkPerByte * c.text.size() + kRegexWorkFloor);
  }
}

TEST(RegexPattern, WorkIsTheSameOnEveryRun) {
  auto re = RegexPattern::Create("(?=a*c)a|.", "test");
  ASSERT_TRUE(re.ok());
  const std::string text(1000, 'a');  // quadratic, but within the floor
  uint64_t first = 0, second = 0;
  ASSERT_TRUE(re->FindAll(text, &first).ok());
  ASSERT_TRUE(re->FindAll(text, &second).ok());
  EXPECT_EQ(first, second);
  EXPECT_GT(first, 1000u * 1000u / 2);  // every character's look-ahead is paid for
}

TEST(RegexPattern, BackReferencesAreRefusedWhenCompiled) {
  for (const char* pattern : {"(a)\\1", "(?<x>a)\\k<x>", "(a)\\g{1}"}) {
    auto re = RegexPattern::Create(pattern, "test.json: pre_tokenizer.pattern.Regex");
    ASSERT_FALSE(re.ok()) << pattern;
    EXPECT_NE(re.status().message().find("back reference"), std::string::npos)
        << re.status().message();
  }
}

}  // namespace
}  // namespace tierflow

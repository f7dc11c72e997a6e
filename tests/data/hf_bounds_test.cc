// Bounds on what a tokenizer.json can make encoding cost (issue #40, "Outside
// input without bounds"): each test is named after a finding or a variant of
// one, and asserts the clear error (file, step, what was exceeded) or the
// linear work that replaced an unbounded one. No test measures time: work is
// counted (regex steps, automaton steps) or the bound is an error.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/hf_added_tokens.h"
#include "data/hf_tokenizer.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

// One token per character of the texts below, "▁" included, and an unk.
Json CharModel() {
  Json vocab = Json::object();
  int id = 0;
  for (char c : std::string(" abcdefghijklmnopqrstuvwxyz<>|.!-_0123456789")) {
    vocab[std::string(1, c)] = id++;
  }
  vocab["\xE2\x96\x81"] = id++;
  vocab["<unk>"] = id++;
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}, {"unk_token", "<unk>"}};
}

StatusOr<std::unique_ptr<HfTokenizer>> Load(Json root) {
  root["model"] = CharModel();
  root["added_tokens"] = {{{"id", 100}, {"content", "<|endoftext|>"}, {"special", true}}};
  return HfTokenizer::Create(root.dump(), "test/tokenizer.json", nullptr);
}

Json SplitRegex(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}};
}

// The error `status` must be: InvalidArgument naming the file and `field`,
// and containing `what`.
void ExpectBoundError(const Status& status, const std::string& field, const std::string& what) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("test/tokenizer.json: " + field), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find(what), std::string::npos) << status.message();
}

// Split (?=a*c)a|. rescans the rest of a run of a's at every character:
// quadratic, 2 MB of text ran past 60 s. Each match was linear, so only a
// bound on the work of the whole text stops it.
TEST(HfBounds, SplitRegexWithLookaheadEndsWithABoundError) {
  Json root;
  root["pre_tokenizer"] = SplitRegex("(?=a*c)a|.");
  auto t = Load(root);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ids = (*t)->Encode(std::string(64 << 10, 'a'));
  ExpectBoundError(ids.status(), "pre_tokenizer.pattern.Regex", "steps of matching work per byte");
  EXPECT_NE(ids.status().message().find("(?=a*c)a|."), std::string::npos);
}

// (?:a|aa)*?c|. nests a backtracking point per character of the run and
// backtracks exponentially; it ended in "Internal: JIT stack limit reached".
TEST(HfBounds, SplitRegexWithNestedRepeatEndsWithABoundError) {
  for (const char* regex : {"(?:a|aa)*?c|.", "(?:a|aa)*c|."}) {
    SCOPED_TRACE(regex);
    Json root;
    root["pre_tokenizer"] = SplitRegex(regex);
    auto t = Load(root);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto ids = (*t)->Encode(std::string(64 << 10, 'a'));
    ExpectBoundError(ids.status(), "pre_tokenizer.pattern.Regex", "matching work");
  }
}

// A Replace normalizer's regex is bound the same way (a*c alone would not
// run: PCRE2 sees that the text holds no "c").
TEST(HfBounds, ReplaceRegexThatRescansEndsWithABoundError) {
  Json root;
  root["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "a*c|a"}}}, {"content", "x"}};
  auto t = Load(root);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto ids = (*t)->Encode(std::string(64 << 10, 'a'));
  ExpectBoundError(ids.status(), "normalizer.pattern.Regex", "matching work");
}

Json ReplaceChain(int steps, const Json& pattern) {
  Json chain = Json::array();
  for (int i = 0; i < steps; ++i) {
    chain.push_back({{"type", "Replace"}, {"pattern", pattern}, {"content", "aa"}});
  }
  return {{"type", "Sequence"}, {"normalizers", chain}};
}

// 30 Replace "a" -> "aa" steps (a 5 KB file) doubled the text until memory
// ran out. Every step is now bound by the Sequence's input: 16 doublings of
// "banana" pass 16 * 6 bytes + 64 KiB at the 15th step, which is named.
TEST(HfBounds, ReplaceChainThatDoublesIsRefused) {
  for (const Json& pattern : {Json{{"String", "a"}}, Json{{"Regex", "a"}}}) {
    SCOPED_TRACE(pattern.dump());
    Json root;
    root["normalizer"] = ReplaceChain(16, pattern);
    auto t = Load(root);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto ids = (*t)->Encode("banana");
    ASSERT_NO_FATAL_FAILURE(ExpectBoundError(ids.status(), "normalizer.normalizers[14]: Replace",
                                             "would make the text longer than 65632 bytes"));
    // The finding's chain ends the same way, at the same step.
    root["normalizer"] = ReplaceChain(30, pattern);
    t = Load(root);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ExpectBoundError((*t)->Encode("banana").status(), "normalizer.normalizers[14]", "65632 bytes");
  }
}

// NFKC's largest expansion (U+FDFA, 3 bytes -> 33) stays within the bound:
// the bound refuses chains, not the Unicode forms.
TEST(HfBounds, NfkcLargestExpansionIsWithinTheBound) {
  Json root;
  root["normalizer"] = {{"type", "NFKC"}};
  auto t = Load(root);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "\xEF\xB7\xBA";
  EXPECT_TRUE((*t)->Encode(text).ok());
}

// A 1000-character Metaspace replacement on 1 MB of text took 3.1 GB. The
// bytes a replacement adds are counted before a piece is built.
TEST(HfBounds, MetaspaceReplacementIsBounded) {
  std::string replacement;
  for (int i = 0; i < 1000; ++i) replacement += "\xE2\x96\x81";
  Json root;
  root["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", replacement}};
  auto t = Load(root);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::string text;
  while (text.size() < (8 << 10)) text += "ab ";
  ExpectBoundError((*t)->Encode(text).status(), "pre_tokenizer: Metaspace's replacement",
                   "would make the text longer than");
  // A short text may still grow by the floor (64 KiB).
  EXPECT_TRUE((*t)->Encode("a b c").ok());
}

// A Sequence of ByteLevel pre-tokenizers doubles every byte above 0x7F at
// each step; the chain is bound by the Sequence's input too.
TEST(HfBounds, PreTokenizerChainThatDoublesIsRefused) {
  Json steps = Json::array();
  for (int i = 0; i < 12; ++i) {
    steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  }
  Json root;
  root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  auto t = Load(root);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "\xC3\xA9";  // é
  ExpectBoundError((*t)->Encode(text).status(), "pre_tokenizer.pretokenizers[",
                   "ByteLevel would make the text longer than");
}

// Decoding cannot fail, so a decoder that could lengthen text past the
// bound (Replace steps whose content is longer than their pattern) is
// refused when the file is loaded, naming the step that passes it.
TEST(HfBounds, DecoderReplaceChainThatDoublesIsRefused) {
  Json steps = Json::array();
  for (int i = 0; i < 30; ++i) {
    steps.push_back({{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}});
  }
  Json root;
  root["decoder"] = {{"type", "Sequence"}, {"decoders", steps}};
  ExpectBoundError(Load(root).status(), "decoder.decoders[4]", "may lengthen decoded text");
  root["decoder"] = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(100, 'b')}};
  ExpectBoundError(Load(root).status(), "decoder", "100 times");
}

// Added-token matching compared every token against every position: 60k
// added tokens on 300 KB of text took 55 s. It is now an automaton over the
// tokens, at most 2 steps per byte of text however many tokens there are,
// and it finds what the old matcher found (hf_added_tokens_test.cc compares
// them on random texts).
TEST(HfBounds, AddedTokenMatchingIsLinear) {
  std::vector<AddedToken> tokens;
  for (int i = 0; i < 60000; ++i) {
    AddedToken t;
    t.id = 1000 + i;
    t.content = "<extra_token_" + std::to_string(i) + ">";
    tokens.push_back(t);
  }
  tokens.push_back({.id = 999, .content = std::string(2000, '<')});  // a long near-miss
  const AddedTokenMatcher matcher(tokens);
  std::string text;
  std::mt19937 rng(7);
  while (text.size() < (300 << 10)) {
    text += rng() % 4 == 0 ? "<extra_token_" + std::to_string(rng() % 70000) + ">" : "<<<<<<<<";
  }
  uint64_t steps = 0;
  const std::vector<TextSegment> segments = matcher.Split(text, &steps);
  EXPECT_LE(steps, 2 * text.size());
  // The segments tile the text, and each token segment holds its token.
  size_t at = 0, matched = 0;
  for (const TextSegment& s : segments) {
    EXPECT_EQ(s.begin, at);
    if (s.token >= 0) {
      ++matched;
      const std::string expected = s.token == 999
                                       ? std::string(2000, '<')
                                       : "<extra_token_" + std::to_string(s.token - 1000) + ">";
      EXPECT_EQ(text.substr(s.begin, s.end - s.begin), expected);
    }
    at = s.end;
  }
  EXPECT_EQ(at, text.size());
  EXPECT_GT(matched, 1000u);
}

}  // namespace
}  // namespace tierflow

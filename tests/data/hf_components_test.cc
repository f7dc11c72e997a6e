// tokenizer.json components that the model fixtures do not reach, each
// against the semantics of Hugging Face's tokenizers (the Split and added-token
// expectations were checked with tokenizers 0.23.2's Node binding): Split behaviors,
// added-token options (lstrip, rstrip, single_word, normalized), NFKC and
// Strip normalizers, the Metaspace decoder, byte fallback without byte
// tokens, and token ids written as text.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_config.h"
#include "data/token_id_text.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

// A character-level BPE over the printable ASCII letters used below, no
// merges: each character of a piece is one token, so the pieces a
// pre-tokenizer makes show in the decoded tokens.
Json CharModel() {
  Json vocab = Json::object();
  int id = 0;
  for (char c : std::string(" abcdefghijklmnopqrstuvwxyz<>|.,!?-_0123456789\xE2\x96\x81")) {
    vocab[std::string(1, c)] = id++;
  }
  vocab.erase(std::string(1, '\xE2'));
  vocab.erase(std::string(1, '\x96'));
  vocab.erase(std::string(1, '\x81'));
  vocab["\xE2\x96\x81"] = id++;
  vocab["<unk>"] = id++;
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}, {"unk_token", "<unk>"}};
}

std::unique_ptr<HfTokenizer> Make(Json root) {
  if (!root.contains("model")) root["model"] = CharModel();
  if (!root.contains("added_tokens")) {
    root["added_tokens"] = {{{"id", 100}, {"content", "<|endoftext|>"}, {"special", true}}};
  }
  auto t = HfTokenizer::Create(root.dump(), "test/tokenizer.json", nullptr);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(HfComponents, SplitBehaviorsCutAsTokenizersDoes) {
  // A model whose merges build exactly the expected pieces, so each piece
  // comes out as one token (merges never cross pieces).
  struct Case {
    std::string behavior;
    bool invert;
    std::vector<std::string> pieces;
  };
  const std::string text = "ab--cd-e";
  const std::vector<Case> cases = {
      {"Removed", false, {"ab", "cd", "e"}},
      {"Isolated", false, {"ab", "-", "-", "cd", "-", "e"}},
      {"MergedWithPrevious", false, {"ab-", "-", "cd-", "e"}},
      {"MergedWithNext", false, {"ab", "-", "-cd", "-e"}},
      {"Contiguous", false, {"ab", "--", "cd", "-", "e"}},
      {"Removed", true, {"-", "-", "-"}},
  };
  for (const Case& c : cases) {
    Json vocab = Json::object();
    int id = 0;
    for (const char* p : {"a", "b", "c", "d", "e", "-"}) vocab[p] = id++;
    Json merges = Json::array();
    for (const std::string& p : c.pieces) {
      // Merges that build each expected piece left to right.
      std::string built(1, p[0]);
      for (size_t k = 1; k < p.size(); ++k) {
        const std::string next = built + p[k];
        if (!vocab.contains(next)) {
          vocab[next] = id++;
          merges.push_back(built + " " + std::string(1, p[k]));
        }
        built = next;
      }
    }
    Json root;
    root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
    root["added_tokens"] = {{{"id", 500}, {"content", "<|endoftext|>"}, {"special", true}}};
    root["pre_tokenizer"] = {{"type", "Split"},
                             {"pattern", {{"String", "-"}}},
                             {"behavior", c.behavior},
                             {"invert", c.invert}};
    auto t = Make(root);
    ASSERT_NE(t, nullptr);
    auto ids = t->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    std::vector<std::string> got;
    for (int32_t i : *ids) got.push_back(t->Decode(std::vector<int32_t>{i}));
    EXPECT_EQ(got, c.pieces) << c.behavior << (c.invert ? " inverted" : "");
  }
}

TEST(HfComponents, AddedTokenOptionsStripAndSingleWordAsTokenizersDoes) {
  Json root;
  root["added_tokens"] = {{{"id", 100}, {"content", "<|endoftext|>"}, {"special", true}},
                          {{"id", 101}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}},
                          {{"id", 102}, {"content", "<sep>"}, {"special", true}, {"rstrip", true}},
                          {{"id", 103}, {"content", "cat"}, {"single_word", true}},
                          {{"id", 104}, {"content", "<tok>"}, {"special", true}},
                          {{"id", 105}, {"content", "<tok>>"}, {"special", true}}};
  auto t = Make(root);
  ASSERT_NE(t, nullptr);
  const auto ids = [&](const std::string& text) { return *t->Encode(text); };
  const int32_t space = *t->TokenId(" "), a = *t->TokenId("a"), c = *t->TokenId("c");
  // lstrip swallows the spaces on its left, rstrip those on its right.
  EXPECT_EQ(ids("a  <mask> a"), (std::vector<int32_t>{a, 101, space, a}));
  EXPECT_EQ(ids("a <sep>  a"), (std::vector<int32_t>{a, space, 102, a}));
  // single_word: only where no word character touches it.
  EXPECT_EQ(ids("a cat a"), (std::vector<int32_t>{a, space, 103, space, a}));
  EXPECT_EQ(ids("cats")[0], c);
  // Leftmost-longest.
  EXPECT_EQ(ids("<tok>>"), (std::vector<int32_t>{105}));
  EXPECT_EQ(ids("<tok>"), (std::vector<int32_t>{104}));
}

TEST(HfComponents, NormalizersMetaspaceDecoderAndByteFallbackWithoutByteTokens) {
  // NFKC folds the ligature "ﬁ" to "fi"; Strip drops outer white space.
  Json root;
  root["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "NFKC"}}, {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}}}};
  auto t = Make(root);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("  \xEF\xAC\x81x "), *t->Encode("fix"));

  // The Metaspace decoder drops every "▁" of the first token (tokenizers
  // 0.23) and turns the others into spaces.
  Json meta;
  Json vocab = CharModel()["vocab"];
  vocab["\xE2\x96\x81\xE2\x96\x81"] = 200;
  meta["model"] = {{"type", "BPE"},
                   {"vocab", vocab},
                   {"merges", {"\xE2\x96\x81 \xE2\x96\x81"}},
                   {"unk_token", "<unk>"}};
  meta["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "\xE2\x96\x81"},
                           {"prepend_scheme", "first"},
                           {"split", true}};
  meta["decoder"] = {
      {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}};
  auto m = Make(meta);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->Decode(*m->Encode("hi you")), "hi you");
  EXPECT_EQ(m->Decode(std::vector<int32_t>{200, *m->TokenId("a")}), "a");

  // A character outside the vocabulary becomes unk (no byte tokens exist);
  // fuse_unk makes a run of them one.
  Json fused;
  fused["model"] = CharModel();
  fused["model"]["fuse_unk"] = true;
  fused["model"]["byte_fallback"] = true;
  auto f = Make(fused);
  ASSERT_NE(f, nullptr);
  const int32_t unk = *f->TokenId("<unk>");
  EXPECT_EQ(*f->Encode("a\xE2\x82\xAC\xE2\x82\xAC"), (std::vector<int32_t>{*f->TokenId("a"), unk}));
  // Without unk, such a character is refused by name.
  Json strict;
  strict["model"] = CharModel();
  strict["model"].erase("unk_token");
  auto s = Make(strict);
  ASSERT_NE(s, nullptr);
  auto refused = s->Encode("a\xE2\x82\xAC");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("U+20AC"), std::string::npos)
      << refused.status().message();
  // Invalid UTF-8 is named by offset.
  auto bad = s->Encode("ab\xFF");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("byte offset 2"), std::string::npos);
}

// tokenizer_config.json is outside input: a deeply nested one is an error
// naming the file, not a stack overflow; BOS/EOS read in both spellings.
TEST(HfTokenizerConfig, DeepFilesAreRefusedAndTokensReadInBothSpellings) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto bad = ParseHfTokenizerConfig("{\"x\": " + deep + "}", "tokenizer_config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tokenizer_config.json"), std::string::npos)
      << bad.status().message();
  auto ok = ParseHfTokenizerConfig(
      R"({"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"},
          "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})",
      "tokenizer_config.json");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->bos_token, "<s>");
  EXPECT_EQ(ok->eos_token, "</s>");
  EXPECT_EQ(ok->chat_template, "D");
}

TEST(TokenIdText, JsonArraysAndSeparatedIntegersAreReadAndBadItemsNamed) {
  EXPECT_EQ(*ParseTokenIdText("[1, 2,3]", 10), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*ParseTokenIdText(" 4 5\n6,7 ", 10), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_TRUE(ParseTokenIdText("", 10)->empty());
  auto range = ParseTokenIdText("1 10", 10);
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("item 2 (\"10\") is outside the vocabulary [0, 10)"),
            std::string::npos);
  auto word = ParseTokenIdText("1 x2", 10);
  ASSERT_FALSE(word.ok());
  EXPECT_NE(word.status().message().find("item 2 (\"x2\") is not an integer"), std::string::npos);
  EXPECT_FALSE(ParseTokenIdText("[1, 2", 10).ok());
  EXPECT_FALSE(ParseTokenIdText("-1", 10).ok());
  EXPECT_FALSE(ParseTokenIdText("99999999999999999999", 10).ok());
}

}  // namespace
}  // namespace tierflow

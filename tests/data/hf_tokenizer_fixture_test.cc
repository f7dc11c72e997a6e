// Hugging Face tokenizers, checked against the reference implementation.
//
// tests/data/tokenizers/ holds small tokenizer files built like the real
// ones of Llama 3 (byte-level BPE, Llama 3's split regex, ignore_merges),
// Qwen2 (NFC, Qwen2's regex), Llama 2 (SentencePiece-style BPE with byte
// fallback, Prepend/Replace normalizer) and Mistral v0.3 (Metaspace
// prepend_scheme "first"), plus a bare SentencePiece tokenizer.model. Each
// expected.json holds ids that Hugging Face's tokenizers library (Rust, via
// its npm binding) or SentencePiece's spm_encode produced for ~57 tricky
// texts (tools/fixtures/tokenizers/ regenerates them).
#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"

namespace tierflow {
namespace {

std::string FixtureDir(const std::string& config) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/" + config;
}

nlohmann::json ReadExpected(const std::string& config) {
  std::ifstream in(FixtureDir(config) + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      out += "\\x" + std::to_string(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, EncodesToTheReferenceIdsAndDecodesAsTheReferenceDoes) {
  const std::string config = GetParam();
  auto tokenizer = LoadTokenizer(FixtureDir(config));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const nlohmann::json expected = ReadExpected(config);
  ASSERT_GE(expected["cases"].size(), 40u);
  int checked = 0;
  for (const auto& c : expected["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(config + "/" + name + ": \"" + Printable(text) + "\"");
    auto ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>());
    if (c.contains("ids_with_special")) {
      auto with = (*tokenizer)->EncodeWithSpecialTokens(text);
      ASSERT_TRUE(with.ok()) << with.status().ToString();
      EXPECT_EQ(*with, c["ids_with_special"].get<std::vector<int32_t>>());
    }
    const auto reference_ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(Printable((*tokenizer)->Decode(reference_ids)),
              Printable(c["decoded"].get<std::string>()));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(expected["cases"].size()));
}

INSTANTIATE_TEST_SUITE_P(Configs, HfFixture,
                         ::testing::Values("llama3", "qwen2", "llama2", "mistral", "spm"));

}  // namespace
}  // namespace tierflow

namespace tierflow {
namespace {

std::string CorpusPrefix(size_t bytes) {
  std::ifstream in(std::string(TIERFLOW_SOURCE_DIR) + "/data/tiny_corpus.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min(text.size(), bytes));
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
  return text;
}

// The llama2 fixture is libsentencepiece's model converted to tokenizer.json
// (as transformers does): over long text (one piece, encoded word by word by
// BpeModel) both must give the same ids, and encoding from several threads at
// once the same ids as from one.
TEST(HfTokenizerLongText, SentencePieceStyleBpeMatchesLibsentencepieceOverACorpus) {
  const std::string dir = std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/";
  auto hf = LoadTokenizer(dir + "llama2");
  auto spm = LoadTokenizer(dir + "spm/tokenizer.model");
  ASSERT_TRUE(hf.ok() && spm.ok());
  const std::string text = CorpusPrefix(60000);
  auto a = (*hf)->Encode(text);
  auto b = (*spm)->Encode(text);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_GT(a->size(), 10000u);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*hf)->Decode(*a), text);

  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { got[i] = *(*hf)->Encode(text); });
  }
  for (auto& t : threads) t.join();
  for (const auto& ids : got) EXPECT_EQ(ids, *a);
}

}  // namespace
}  // namespace tierflow

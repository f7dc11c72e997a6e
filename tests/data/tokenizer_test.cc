// Byte tokenizer round trips; GPT-2 byte-level BPE on a hand-made vocabulary
// (merge order by rank, byte fallback, unicode, the end-of-text token); the
// byte-level alphabet; every malformed vocabulary / merges / tokenizer.json
// case; LoadTokenizer's lookup.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/gpt2_byte_level.h"
#include "data/hf_tokenizer.h"
#include "tests/data/data_test_util.h"

namespace tierflow {
namespace {

using testing_data::FixtureByteId;
using testing_data::FixtureMergedId;
using testing_data::FixtureMergesTxt;
using testing_data::FixtureVocabJson;
using testing_data::kFixtureEotId;
using testing_data::ScratchDir;
using testing_data::WriteBytes;

std::unique_ptr<Gpt2BpeTokenizer> Fixture() {
  auto t = Gpt2BpeTokenizer::FromVocabAndMergesText(FixtureVocabJson(), FixtureMergesTxt(),
                                                    "vocab.json", "merges.txt");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& t, std::string_view text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

int B(char c) { return FixtureByteId(static_cast<unsigned char>(c)); }

// ---- ByteTokenizer ----

TEST(ByteTokenizer, EveryByteButNulIsItsOwnTokenAndRoundTrips) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.eot_token(), 0);
  std::string all;
  for (int b = 1; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<int32_t> ids = Ids(t, all);
  ASSERT_EQ(ids.size(), 255u);
  for (int b = 1; b < 256; ++b) EXPECT_EQ(ids[b - 1], b);
  EXPECT_EQ(t.Decode(ids), all);
  const std::string text = "héllo\n<|endoftext|>second doc";
  EXPECT_EQ(t.Decode(Ids(t, text)), text);
}

TEST(ByteTokenizer, EndOfTextTextIsTokenZero) {
  ByteTokenizer t;
  EXPECT_EQ(Ids(t, "a<|endoftext|>b"), (std::vector<int32_t>{'a', 0, 'b'}));
  EXPECT_EQ(Ids(t, "<|endoftext"),
            (std::vector<int32_t>{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't'}));
}

TEST(ByteTokenizer, NulByteIsAnErrorNamingItsOffset) {
  ByteTokenizer t;
  auto ids = t.Encode(std::string("abc\0d", 5));
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("byte offset 3"), std::string::npos)
      << ids.status().message();
}

TEST(ByteTokenizer, OutOfVocabularyIdsDecodeToReplacementCharacter) {
  ByteTokenizer t;
  EXPECT_EQ(t.Decode(std::vector<int32_t>{'a', 256, -1, 'b'}),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
}

// ---- byte-level alphabet ----

TEST(Gpt2ByteLevel, MatchesOpenAIsBytesToUnicode) {
  EXPECT_EQ(Gpt2ByteToCodePoint(' '), 0x120u);   // Ġ
  EXPECT_EQ(Gpt2ByteToCodePoint('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(Gpt2ByteToCodePoint(0), 0x100u);     // Ā
  EXPECT_EQ(Gpt2ByteToCodePoint('!'), static_cast<char32_t>('!'));
  EXPECT_EQ(Gpt2ByteToCodePoint(0x7F), 0x121u);  // DEL follows the 33 control/space bytes
  EXPECT_EQ(Gpt2ByteToCodePoint(0xAD), 0x143u);  // soft hyphen is the last
  EXPECT_EQ(Gpt2ByteToCodePoint(0xE9), 0xE9u);   // é stands for itself
  for (int b = 0; b < 256; ++b) EXPECT_EQ(Gpt2CodePointToByte(Gpt2ByteToCodePoint(b)), b);
  EXPECT_EQ(Gpt2CodePointToByte(0x144), -1);
  EXPECT_EQ(Gpt2CodePointToByte(' '), -1);
  EXPECT_EQ(Gpt2BytesToVocabText(" the\n"), "Ġthe\xC4\x8A");
  auto bytes = Gpt2VocabTextToBytes("Ġthe");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, " the");
  auto bad = Gpt2VocabTextToBytes("a b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("U+0020"), std::string::npos) << bad.status().message();
}

// ---- BPE on the fixture ----

TEST(Gpt2Bpe, FixtureLoads) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 301);
  EXPECT_EQ(t->eot_token(), kFixtureEotId);
  EXPECT_EQ(t->num_merges(), 10);
}

TEST(Gpt2Bpe, MergesApplyInRankOrderIncludingMergedTokens) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  // " the": " t" (rank 0) and "he" (rank 1) first, then " t"+"he" (rank 2).
  EXPECT_EQ(t->EncodePiece(" the"), std::vector<int32_t>{FixtureMergedId(" the")});
  // "abc": "bc" has rank 3, "ab" rank 4, so "bc" wins although "ab" is leftmost.
  EXPECT_EQ(t->EncodePiece("abc"), (std::vector<int32_t>{B('a'), FixtureMergedId("bc")}));
  EXPECT_EQ(t->EncodePiece("abd"), (std::vector<int32_t>{FixtureMergedId("ab"), B('d')}));
  // "hello" -> he, ll (ranks 1, 7), hell (8), hello (9).
  EXPECT_EQ(t->EncodePiece("hello"), std::vector<int32_t>{FixtureMergedId("hello")});
  EXPECT_EQ(t->EncodePiece("hellx"), (std::vector<int32_t>{FixtureMergedId("hell"), B('x')}));
}

TEST(Gpt2Bpe, OverlappingPairsMergeLeftToRight) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  const int aa = FixtureMergedId("aa");
  EXPECT_EQ(t->EncodePiece("aaa"), (std::vector<int32_t>{aa, B('a')}));
  EXPECT_EQ(t->EncodePiece("aaaa"), (std::vector<int32_t>{aa, aa}));
  EXPECT_EQ(t->EncodePiece("aaaaa"), (std::vector<int32_t>{aa, aa, B('a')}));
}

TEST(Gpt2Bpe, BytesWithoutMergesFallBackToByteTokens) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "xyz"), (std::vector<int32_t>{B('x'), B('y'), B('z')}));
  // "ü" is two bytes with no merge; "é" has one.
  EXPECT_EQ(Ids(*t, "ü"), (std::vector<int32_t>{FixtureByteId(0xC3), FixtureByteId(0xBC)}));
  EXPECT_EQ(Ids(*t, "é"), std::vector<int32_t>{FixtureMergedId("\xC3\xA9")});
  // A 4-byte emoji is four byte tokens.
  EXPECT_EQ(Ids(*t, "😀").size(), 4u);
}

TEST(Gpt2Bpe, EncodeSplitsFirstSoMergesNeverCrossPieces) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  // " the the": two pieces " the", " the". "the" at the start has no leading
  // space, so only "he" merges.
  const int the = FixtureMergedId(" the");
  EXPECT_EQ(Ids(*t, "the the"), (std::vector<int32_t>{B('t'), FixtureMergedId("he"), the}));
  // "a  the": "a", " ", " the": the run of two spaces gives one to the word.
  EXPECT_EQ(Ids(*t, "a  the"), (std::vector<int32_t>{B('a'), B(' '), the}));
  // "\nthe": the newline is its own piece, so no " t" merge.
  EXPECT_EQ(Ids(*t, "\nthe"), (std::vector<int32_t>{B('\n'), B('t'), FixtureMergedId("he")}));
}

TEST(Gpt2Bpe, EndOfTextAndRoundTrip) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "<|endoftext|>"), std::vector<int32_t>{kFixtureEotId});
  EXPECT_EQ(Ids(*t, "a<|endoftext|> the"),
            (std::vector<int32_t>{B('a'), kFixtureEotId, FixtureMergedId(" the")}));
  for (const std::string text : {"hello the world<|endoftext|>naïve café — 東京\n\n  x", "", "  ",
                                 "<|endoftext|><|endoftext|>"}) {
    EXPECT_EQ(t->Decode(Ids(*t, text)), text);
  }
  EXPECT_EQ(t->Decode(std::vector<int32_t>{299, 5000}), "\xEF\xBF\xBD\xEF\xBF\xBD");  // unused ids
}

TEST(Gpt2Bpe, InvalidUtf8IsAnErrorWithTheOffsetInTheWholeText) {
  auto t = Fixture();
  ASSERT_NE(t, nullptr);
  auto ids = t->Encode("ok<|endoftext|>ab\xFF");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("byte offset 17"), std::string::npos)
      << ids.status().message();
}

TEST(HfTokenizerJson, Gpt2sTokenizerJsonGivesTheSameEncodingsAsItsVocabAndMerges) {
  nlohmann::json root;
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  nlohmann::json vocab = nlohmann::json::parse(FixtureVocabJson());
  vocab.erase("<|endoftext|>");  // comes from added_tokens instead
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [l, r] : testing_data::FixtureMerges()) {
    // Both merge spellings Hugging Face has used.
    if (merges.size() % 2 == 0) {
      merges.push_back(Gpt2BytesToVocabText(l) + " " + Gpt2BytesToVocabText(r));
    } else {
      merges.push_back({Gpt2BytesToVocabText(l), Gpt2BytesToVocabText(r)});
    }
  }
  root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  root["added_tokens"] = {{{"id", kFixtureEotId}, {"content", "<|endoftext|>"}, {"special", true}}};
  auto from_json = HfTokenizer::Create(root.dump(), "tokenizer.json", nullptr);
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  auto fixture = Fixture();
  const std::string text = "hello the abc aaa<|endoftext|>é ü";
  EXPECT_EQ(Ids(**from_json, text), Ids(*fixture, text));
  EXPECT_EQ((*from_json)->eot_token(), kFixtureEotId);
}

// ---- malformed files ----

struct BadCase {
  std::string vocab_json;
  std::string merges_txt;
  std::string expect_in_message;
};

TEST(Gpt2Bpe, MalformedVocabOrMergesAreClearErrors) {
  nlohmann::json good = nlohmann::json::parse(FixtureVocabJson());
  auto without = [&](const std::string& key) {
    nlohmann::json v = good;
    v.erase(key);
    return v.dump();
  };
  auto with = [&](const std::string& key, nlohmann::json value) {
    nlohmann::json v = good;
    v[key] = value;
    return v.dump();
  };
  const std::string merges = FixtureMergesTxt();
  const std::vector<BadCase> cases = {
      {"{not json", merges, "vocab.json: not valid JSON"},
      {"[1, 2]", merges, "JSON object"},
      {with("zz", "seven"), merges, "not an integer"},
      {with("zz", -4), merges, "has id -4"},
      {with("zz", 2000000000), merges, "the largest token id is 2000000000"},
      {with("zz", uint64_t{18446744073709551615u}), merges, "is 18446744073709551615; ids must"},
      {with("zz", FixtureByteId('a')), merges, "is used by both"},
      {with("a b", 400), merges, "U+0020"},
      {without("Ġ"), merges, "single byte 0x20"},
      {without("<|endoftext|>"), merges, "<|endoftext|>"},
      {without("Ġthe"), merges, "merges.txt line 4"},
      {FixtureVocabJson(), merges + "a\n", "merges.txt line 12: expected two tokens"},
      {FixtureVocabJson(), merges + "a b c\n", "merges.txt line 12: expected two tokens"},
      {FixtureVocabJson(), merges + "x y\n", "the token it makes is not in the vocabulary"},
      {FixtureVocabJson(), merges + "xy z\n", "its left token is not in the vocabulary"},
  };
  for (const BadCase& c : cases) {
    auto t = Gpt2BpeTokenizer::FromVocabAndMergesText(c.vocab_json, c.merges_txt, "vocab.json",
                                                      "merges.txt");
    ASSERT_FALSE(t.ok()) << c.expect_in_message;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.expect_in_message), std::string::npos)
        << "expected \"" << c.expect_in_message << "\" in: " << t.status().message();
  }
}

TEST(HfTokenizerJson, UnsupportedComponentsAreUnimplementedNotMisread) {
  nlohmann::json root;
  root["model"] = {{"type", "BPE"},
                   {"vocab", nlohmann::json::parse(FixtureVocabJson())},
                   {"merges", nlohmann::json::array()}};
  nlohmann::json unigram = root;
  unigram["model"]["type"] = "Unigram";
  nlohmann::json lowercase = root;
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  nlohmann::json digits = root;
  digits["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  nlohmann::json wordpiece_decoder = root;
  wordpiece_decoder["decoder"] = {{"type", "WordPiece"}};
  nlohmann::json dropout = root;
  dropout["model"]["dropout"] = 0.1;
  nlohmann::json suffix = root;
  suffix["model"]["end_of_word_suffix"] = "</w>";
  for (const auto& [j, named] : std::vector<std::pair<nlohmann::json, std::string>>{
           {unigram, "Unigram"},
           {lowercase, "normalizer: the normalizer \"Lowercase\""},
           {digits, "pre_tokenizer.pretokenizers[1]: the pre_tokenizer \"Digits\""},
           {wordpiece_decoder, "\"WordPiece\""},
           {dropout, "model.dropout"},
           {suffix, "model.end_of_word_suffix"}}) {
    auto t = HfTokenizer::Create(j.dump(), "tokenizer.json", nullptr);
    ASSERT_FALSE(t.ok()) << named;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << t.status().ToString();
    EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos);
    EXPECT_NE(t.status().message().find(named), std::string::npos) << t.status().message();
  }
  // Mistyped components are reported, not thrown.
  nlohmann::json odd_normalizer = root;
  odd_normalizer["normalizer"] = "NFC";
  nlohmann::json odd_pre = root;
  odd_pre["pre_tokenizer"] = {{"type", 3}};
  for (const auto& j : {odd_normalizer, odd_pre}) {
    auto t = HfTokenizer::Create(j.dump(), "tokenizer.json", nullptr);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
  }
  auto no_model = HfTokenizer::Create("{}", "tokenizer.json", nullptr);
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("no \"model\""), std::string::npos);
  root["model"]["merges"] = nlohmann::json::array({42});
  auto bad_merge = HfTokenizer::Create(root.dump(), "tokenizer.json", nullptr);
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("model.merges[0]"), std::string::npos)
      << bad_merge.status().message();
}

// Typed through io/json_reader.h: a mistyped flag is named, and an added
// token's id above INT64_MAX is reported as written, not wrapped to -1.
TEST(HfTokenizerJson, MistypedFieldsAreNamedAsWritten) {
  nlohmann::json root;
  root["model"] = {{"type", "BPE"},
                   {"vocab", nlohmann::json::parse(FixtureVocabJson())},
                   {"merges", nlohmann::json::array()}};
  nlohmann::json flag = root;
  flag["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", "yes"}};
  auto t = HfTokenizer::Create(flag.dump(), "tokenizer.json", nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(
                "tokenizer.json: pre_tokenizer.use_regex: expected true or false, got \"yes\""),
            std::string::npos)
      << t.status().message();
  nlohmann::json huge = root;
  huge["added_tokens"] = {{{"id", uint64_t{18446744073709551615u}}, {"content", "<|x|>"}}};
  t = HfTokenizer::Create(huge.dump(), "tokenizer.json", nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("added_tokens[0].id: value 18446744073709551615"),
            std::string::npos)
      << t.status().message();
}

// ---- LoadTokenizer ----

TEST(LoadTokenizer, ByteDirectoryAndFile) {
  auto byte = LoadTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  EXPECT_EQ((*byte)->vocab_size(), 256);

  ScratchDir dir;
  WriteBytes(dir.File("encoder.json"), FixtureVocabJson());
  WriteBytes(dir.File("vocab.bpe"), FixtureMergesTxt());
  auto from_dir = LoadTokenizer(dir.path());
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().ToString();
  EXPECT_EQ((*from_dir)->vocab_size(), 301);
  EXPECT_NE((*from_dir)->Describe().find("encoder.json"), std::string::npos);

  auto missing = LoadTokenizer(dir.File("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ScratchDir empty;
  auto empty_dir = LoadTokenizer(empty.path());
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_NE(empty_dir.status().message().find("vocab.json + merges.txt"), std::string::npos);
}

// Issue 18: a 100000-deep tokenizer.json or vocab.json overflowed the stack.
TEST(Gpt2Bpe, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto t = HfTokenizer::Create("{\"model\": {\"vocab\": {}}, \"x\": " + deep + "}",
                               "tokenizer.json", nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("tokenizer.json: JSON nested deeper than 64"),
            std::string::npos)
      << t.status().message();
  auto v = Gpt2BpeTokenizer::FromVocabAndMergesText("{\"a\": " + deep + "}", FixtureMergesTxt(),
                                                    "vocab.json", "merges.txt");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("vocab.json: JSON nested deeper than 64"), std::string::npos)
      << v.status().message();
}

TEST(HfTokenizerJson, AnOutsideValueInAnErrorIsDescribedNotDumped) {
  nlohmann::json root;
  root["model"] = {{"type", "BPE"}, {"vocab", nlohmann::json::parse(FixtureVocabJson())}};
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  root["normalizer"] = big;
  auto t = HfTokenizer::Create(root.dump(), "tokenizer.json", nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("an array of 100000 elements"), std::string::npos)
      << t.status().message().substr(0, 300);
  EXPECT_LT(t.status().message().size(), 1000u);
}

TEST(Gpt2Bpe, APendingCancelStopsEncodingWithAborted) {
  auto t = Gpt2BpeTokenizer::FromVocabAndMergesText(FixtureVocabJson(), FixtureMergesTxt(),
                                                    "vocab.json", "merges.txt");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ResetCancelForTesting();
  RequestCancel(SIGINT);
  auto ids = (*t)->Encode("the cat sat on the mat");
  ResetCancelForTesting();
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kAborted);
  EXPECT_TRUE((*t)->Encode("the cat").ok());
}

}  // namespace
}  // namespace tierflow

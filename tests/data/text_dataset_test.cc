// Text and JSONL datasets: documents and end-of-text tokens, the model's
// vocabulary check, and every bad-data case naming the file (and the line
// for JSONL); LoadTokens' format choice.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <signal.h>

#include "common/cancel.h"
#include "data/byte_tokenizer.h"
#include "data/text_dataset.h"
#include "tests/data/data_test_util.h"

namespace tierflow {
namespace {

using testing_data::PackAs;
using testing_data::ScratchDir;
using testing_data::WriteBytes;

std::vector<int32_t> All(const TokenSource& s) {
  std::vector<int32_t> out(static_cast<size_t>(s.size()));
  s.Read(0, s.size(), out.data());
  return out;
}

std::vector<int32_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

TEST(TextDataset, PlainTextIsOneDocumentTokenizedWhole) {
  ScratchDir dir;
  WriteBytes(dir.File("t.txt"), "ab\ncd");
  ByteTokenizer byte;
  auto s = TokenizeTextFile(dir.File("t.txt"), byte, 256);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(All(*s), Bytes("ab\ncd"));
  EXPECT_EQ(s->name(), dir.File("t.txt"));
}

TEST(TextDataset, JsonlDocumentsArePrecededByEndOfText) {
  ScratchDir dir;
  WriteBytes(dir.File("d.jsonl"),
             "{\"text\": \"ab\", \"id\": 1}\n\n{\"text\": \"c\\nd\"}\r\n{\"text\": \"\"}");
  ByteTokenizer byte;
  auto s = TokenizeJsonlFile(dir.File("d.jsonl"), byte, "text", 256);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(All(*s), (std::vector<int32_t>{0, 'a', 'b', 0, 'c', '\n', 'd', 0}));

  WriteBytes(dir.File("c.jsonl"), "{\"content\": \"xy\"}\n");
  auto other_field = TokenizeJsonlFile(dir.File("c.jsonl"), byte, "content", 256);
  ASSERT_TRUE(other_field.ok());
  EXPECT_EQ(All(*other_field), (std::vector<int32_t>{0, 'x', 'y'}));
}

TEST(TextDataset, BadJsonlLinesNameFileAndLine) {
  ScratchDir dir;
  ByteTokenizer byte;
  struct Case {
    std::string contents;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", ":2: not valid JSON"},
      {"{\"text\": \"ok\"}\n\n[1, 2]\n", ":3: expected a JSON object"},
      {"{\"body\": \"x\", \"id\": 3}\n", ":1: no \"text\" field (it has: \"body\", \"id\")"},
      {"{\"text\": 5}\n", ":1: \"text\" is a number, not a string"},
      {"{\"text\": \"a\\u0000b\"}\n", ":1: field \"text\": text has a NUL byte at byte offset 1"},
      // Issue 18: one 100000-deep line overflowed the stack.
      {"{\"text\": \"ok\"}\n" + std::string(100000, '[') + std::string(100000, ']') + "\n",
       ":2: JSON nested deeper than 64"},
      {"{\"text\": \"ok\"}\n{\"meta\": " + std::string(100000, '[') + "\n",
       ":2: JSON nested deeper than 64"},
      {"\n  \n", "has no documents"},
      {"", "is empty"},
  };
  for (const Case& c : cases) {
    WriteBytes(dir.File("bad.jsonl"), c.contents);
    auto s = TokenizeJsonlFile(dir.File("bad.jsonl"), byte, "text", 256);
    ASSERT_FALSE(s.ok()) << c.phrase;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
    EXPECT_NE(s.status().message().find(dir.File("bad.jsonl")), std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find(c.phrase), std::string::npos)
        << "expected \"" << c.phrase << "\" in: " << s.status().message();
  }
}

TEST(TextDataset, BadTextFilesAreClearErrors) {
  ScratchDir dir;
  ByteTokenizer byte;
  WriteBytes(dir.File("empty.txt"), "");
  auto empty = TokenizeTextFile(dir.File("empty.txt"), byte, 256);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find(dir.File("empty.txt") + " is empty"), std::string::npos);

  WriteBytes(dir.File("nul.txt"), std::string("abc\0", 4));
  auto nul = TokenizeTextFile(dir.File("nul.txt"), byte, 256);
  ASSERT_FALSE(nul.ok());
  EXPECT_NE(
      nul.status().message().find(dir.File("nul.txt") + ": text has a NUL byte at byte offset 3"),
      std::string::npos)
      << nul.status().message();

  // A model vocabulary smaller than the tokenizer's.
  WriteBytes(dir.File("hi.txt"), "hi~");
  auto small = TokenizeTextFile(dir.File("hi.txt"), byte, 120);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("token id 126 at token index 2"), std::string::npos)
      << small.status().message();

  auto missing = TokenizeTextFile(dir.File("missing.txt"), byte, 256);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(LoadTokens, PicksTheReaderByFormat) {
  ScratchDir dir;
  ByteTokenizer byte;
  WriteBytes(dir.File("a.txt"), "xy");
  WriteBytes(dir.File("a.jsonl"), "{\"text\": \"xy\"}");
  WriteBytes(dir.File("a.bin"), PackAs<uint16_t>(std::vector<int>{'x', 'y'}));
  DatasetOptions o;
  o.vocab_size = 256;
  o.path = dir.File("a.txt");
  EXPECT_EQ(All(*LoadTokens(o, &byte)), Bytes("xy"));
  o.path = dir.File("a.jsonl");
  EXPECT_EQ(All(*LoadTokens(o, &byte)), (std::vector<int32_t>{0, 'x', 'y'}));
  o.path = dir.File("a.bin");
  EXPECT_EQ(All(*LoadTokens(o, nullptr)), Bytes("xy"));
  o.path = dir.File("a.txt");
  o.format = DataFormat::kTokens;  // forced: "xy" is one u16 token 0x7978, beyond 256
  auto forced = LoadTokens(o, &byte);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("token id 31096"), std::string::npos)
      << forced.status().message();
  o.format = DataFormat::kText;
  auto no_tokenizer = LoadTokens(o, nullptr);
  ASSERT_FALSE(no_tokenizer.ok());
  EXPECT_NE(no_tokenizer.status().message().find("tokenizer"), std::string::npos);

  EXPECT_EQ(*ParseDataFormat("jsonl"), DataFormat::kJsonl);
  auto bad = ParseDataFormat("csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, text, jsonl or tokens"), std::string::npos);
}

TEST(TextDataset, APendingCancelStopsJsonlTokenizationWithAborted) {
  ScratchDir dir;
  ByteTokenizer byte;
  WriteBytes(dir.File("d.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"cd\"}\n");
  ResetCancelForTesting();
  RequestCancel(SIGTERM);
  auto s = TokenizeJsonlFile(dir.File("d.jsonl"), byte, "text", 256);
  ResetCancelForTesting();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kAborted);
  EXPECT_NE(s.status().message().find("tokenizing " + dir.File("d.jsonl") + ":1"),
            std::string::npos)
      << s.status().message();
  EXPECT_TRUE(TokenizeJsonlFile(dir.File("d.jsonl"), byte, "text", 256).ok());
}

}  // namespace
}  // namespace tierflow

// Token files: raw u16/u32 and llm.c headers (good, bad magic, bad version,
// truncated, trailing bytes, dtype conflicts), ids >= vocab, empty files; each
// error names the file.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/token_source.h"
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

std::string LlmcHeader(int32_t magic, int32_t version, int32_t num_tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = num_tokens;
  return PackAs<int32_t>(header);
}

void ExpectError(const StatusOr<TokenSource>& s, StatusCode code, const std::string& path,
                 const std::string& phrase) {
  ASSERT_FALSE(s.ok()) << phrase;
  EXPECT_EQ(s.status().code(), code) << s.status().ToString();
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find(phrase), std::string::npos)
      << "expected \"" << phrase << "\" in: " << s.status().message();
}

TEST(TokenDtype, ParsesKnownNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseTokenDtype("u16"), TokenDtype::kU16);
  EXPECT_EQ(*ParseTokenDtype("u32"), TokenDtype::kU32);
  auto bad = ParseTokenDtype("u8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"u8\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("u16 or u32"), std::string::npos);
}

TEST(TokenFile, RawU16AndU32) {
  ScratchDir dir;
  const std::vector<int32_t> ids = {0, 1, 50256, 65535, 7};
  WriteBytes(dir.File("a.bin"), PackAs<uint16_t>(ids));
  auto u16 = OpenTokenFile(dir.File("a.bin"), TokenDtype::kU16, 65536);
  ASSERT_TRUE(u16.ok()) << u16.status().ToString();
  EXPECT_EQ(All(*u16), ids);
  EXPECT_EQ(u16->element_bytes(), 2);
  auto defaulted = OpenTokenFile(dir.File("a.bin"), std::nullopt, 65536);  // nanoGPT's u16
  ASSERT_TRUE(defaulted.ok());
  EXPECT_EQ(All(*defaulted), ids);

  const std::vector<int32_t> big = {100000, 3, 128255};
  WriteBytes(dir.File("b.bin"), PackAs<uint32_t>(big));
  auto u32 = OpenTokenFile(dir.File("b.bin"), TokenDtype::kU32, 128256);
  ASSERT_TRUE(u32.ok()) << u32.status().ToString();
  EXPECT_EQ(All(*u32), big);
  EXPECT_EQ(u32->At(2), 128255);
  // The same bytes read as u16 are six different tokens: the flag matters.
  auto as_u16 = OpenTokenFile(dir.File("b.bin"), TokenDtype::kU16, 65536);
  ASSERT_TRUE(as_u16.ok());
  EXPECT_EQ(as_u16->size(), 6);
}

TEST(TokenFile, LlmcHeadersAreRecognised) {
  ScratchDir dir;
  const std::vector<int32_t> ids = {50256, 15496, 995, 13};
  WriteBytes(dir.File("gpt2.bin"), LlmcHeader(20240520, 1, 4) + PackAs<uint16_t>(ids));
  auto gpt2 = OpenTokenFile(dir.File("gpt2.bin"), std::nullopt, 50257);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().ToString();
  EXPECT_EQ(All(*gpt2), ids);
  auto agreeing = OpenTokenFile(dir.File("gpt2.bin"), TokenDtype::kU16, 50257);
  EXPECT_TRUE(agreeing.ok());

  const std::vector<int32_t> llama = {128000, 9906, 1917};
  WriteBytes(dir.File("llama.bin"), LlmcHeader(20240801, 7, 3) + PackAs<uint32_t>(llama));
  auto l3 = OpenTokenFile(dir.File("llama.bin"), std::nullopt, 128256);
  ASSERT_TRUE(l3.ok()) << l3.status().ToString();
  EXPECT_EQ(All(*l3), llama);

  // Our writer produces what we read.
  ASSERT_TRUE(WriteLlmcTokenFile(dir.File("w.bin"), ids, TokenDtype::kU16).ok());
  auto written = OpenTokenFile(dir.File("w.bin"), std::nullopt, 50257);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(All(*written), ids);
}

TEST(TokenFile, MalformedLlmcHeadersAreClearErrors) {
  ScratchDir dir;
  const std::string body = PackAs<uint16_t>(std::vector<int>{1, 2, 3, 4});
  struct Case {
    std::string name, bytes;
    StatusCode code;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"version.bin", LlmcHeader(20240520, 2, 4) + body, StatusCode::kInvalidArgument,
       "has version 2; tierflow reads version 1"},
      {"short_header.bin", LlmcHeader(20240520, 1, 4).substr(0, 100), StatusCode::kDataLoss,
       "has only 100 bytes; the llm.c header is 1024"},
      {"truncated.bin", LlmcHeader(20240520, 1, 5) + body, StatusCode::kDataLoss, "truncated"},
      {"trailing.bin", LlmcHeader(20240520, 1, 3) + body, StatusCode::kDataLoss, "trailing bytes"},
      {"negative.bin", LlmcHeader(20240520, 1, -1) + body, StatusCode::kDataLoss,
       "cannot be negative"},
      {"zero.bin", LlmcHeader(20240520, 1, 0), StatusCode::kInvalidArgument, "no tokens"},
      {"l3version.bin", LlmcHeader(20240801, 1, 2) + body, StatusCode::kInvalidArgument,
       "tierflow reads version 7"},
  };
  for (const Case& c : cases) {
    WriteBytes(dir.File(c.name), c.bytes);
    ExpectError(OpenTokenFile(dir.File(c.name), std::nullopt, 50257), c.code, dir.File(c.name),
                c.phrase);
  }
  // A header that says u16 while the flag says u32.
  WriteBytes(dir.File("conflict.bin"), LlmcHeader(20240520, 1, 4) + body);
  ExpectError(OpenTokenFile(dir.File("conflict.bin"), TokenDtype::kU32, 50257),
              StatusCode::kInvalidArgument, dir.File("conflict.bin"), "--token-dtype u32");
  // A bad magic is not a header at all: the file reads as raw tokens, and
  // 1024 header bytes of junk then fail the vocabulary check.
  WriteBytes(dir.File("badmagic.bin"), LlmcHeader(20240519, 1, 4) + body);
  ExpectError(OpenTokenFile(dir.File("badmagic.bin"), std::nullopt, 50257),
              StatusCode::kInvalidArgument, dir.File("badmagic.bin"),
              "token id 55431 at token index 0");  // 0xD887, the low half of 20240519
}

TEST(TokenFile, BadDataIsAClearError) {
  ScratchDir dir;
  WriteBytes(dir.File("empty.bin"), "");
  ExpectError(OpenTokenFile(dir.File("empty.bin"), TokenDtype::kU16, 256),
              StatusCode::kInvalidArgument, dir.File("empty.bin"), "is empty");
  WriteBytes(dir.File("odd.bin"), std::string(7, '\1'));
  ExpectError(OpenTokenFile(dir.File("odd.bin"), TokenDtype::kU32, 256), StatusCode::kDataLoss,
              dir.File("odd.bin"), "not a whole number of u32 tokens");
  WriteBytes(dir.File("big.bin"), PackAs<uint16_t>(std::vector<int>{1, 2, 256, 3}));
  ExpectError(OpenTokenFile(dir.File("big.bin"), TokenDtype::kU16, 256),
              StatusCode::kInvalidArgument, dir.File("big.bin"),
              "token id 256 at token index 2 is not below the vocabulary size 256");
  WriteBytes(dir.File("huge.bin"), PackAs<uint32_t>(std::vector<uint32_t>{1, 0xFFFFFFFFu}));
  ExpectError(OpenTokenFile(dir.File("huge.bin"), TokenDtype::kU32, 50257),
              StatusCode::kInvalidArgument, dir.File("huge.bin"),
              "token id 4294967295 at token index 1");
  ExpectError(OpenTokenFile(dir.File("missing.bin"), TokenDtype::kU16, 256), StatusCode::kNotFound,
              dir.File("missing.bin"), "missing.bin");
}

TEST(TokenSourceFromTokens, ValidatesAndCopiesShareTheTokens) {
  auto s = TokenSource::FromTokens({5, 6, 7}, "mem", 8);
  ASSERT_TRUE(s.ok());
  TokenSource copy = *s;
  EXPECT_EQ(All(copy), (std::vector<int32_t>{5, 6, 7}));
  auto bad = TokenSource::FromTokens({5, -1}, "mem", 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token index 1"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(TokenSource::FromTokens({}, "mem", 8).ok());
}

}  // namespace
}  // namespace tierflow

// ReadFileToString: the one whole-file reader. Pins the contents read back
// across several read() calls, the size cap (checked up front for regular
// files and while reading for files of unknown size), and errors that name
// the path.
#include "io/file_reader.h"

#include <unistd.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

TEST(ReadFileToString, ReadsAFileLargerThanOneReadBuffer) {
  ScratchDir dir;
  std::string bytes;
  for (int i = 0; i < 300000; ++i) bytes.push_back(static_cast<char>(i * 7 + (i >> 9)));
  WriteBytes(dir.File("big"), bytes);
  auto text = ReadFileToString(dir.File("big"), bytes.size());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, bytes);  // exactly max_num_bytes is allowed
}

TEST(ReadFileToString, EmptyFileIsAnEmptyString) {
  ScratchDir dir;
  WriteBytes(dir.File("empty"), "");
  auto text = ReadFileToString(dir.File("empty"), 0);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "");
}

TEST(ReadFileToString, MissingFileIsNotFoundNamingThePath) {
  ScratchDir dir;
  auto text = ReadFileToString(dir.File("absent.json"), 1 << 20);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr(dir.File("absent.json")));
}

TEST(ReadFileToString, FileOverTheCapIsRefusedNamingThePathAndTheCap) {
  ScratchDir dir;
  WriteBytes(dir.File("config.json"), std::string(101, 'x'));
  auto text = ReadFileToString(dir.File("config.json"), 100);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr(dir.File("config.json")));
  EXPECT_THAT(text.status().message(), HasSubstr("100 bytes"));
}

// /proc files report size 0, so only the read loop can enforce the cap.
TEST(ReadFileToString, CapHoldsForAFileOfUnknownSize) {
  auto whole = ReadFileToString("/proc/self/status", 1 << 20);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_GT(whole->size(), 16u);
  auto capped = ReadFileToString("/proc/self/status", 16);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(capped.status().message(), HasSubstr("/proc/self/status"));
}

TEST(ReadFileToString, DirectoryIsInvalidArgument) {
  ScratchDir dir;
  auto text = ReadFileToString(dir.path(), 1 << 20);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("is a directory"));
}

TEST(ReadFileToString, NoFollowRefusesASymlinkThatIsOtherwiseFollowed) {
  ScratchDir dir;
  WriteBytes(dir.File("target"), "secret");
  ASSERT_EQ(::symlink(dir.File("target").c_str(), dir.File("link").c_str()), 0);
  auto followed = ReadFileToString(dir.File("link"), 100);
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  EXPECT_EQ(*followed, "secret");
  ReadFileOptions options;
  options.no_follow = true;
  auto refused = ReadFileToString(dir.File("link"), 100, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr(dir.File("link")));
  auto plain = ReadFileToString(dir.File("target"), 100, options);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, "secret");
}

}  // namespace
}  // namespace tierflow

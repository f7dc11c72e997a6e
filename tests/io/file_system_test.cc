// Crash-safe file replacement: a failure at any step before the rename
// leaves the old file byte-for-byte intact and no temporary file behind.
#include <string>

#include <gtest/gtest.h>

#include "io/file_system.h"
#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {

using testing_io::FaultInjectingFileSystem;
using testing_io::ReadBytes;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

TEST(WriteFileAtomically, ReplacesTheFileAndLeavesNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.File("f.json");
  WriteBytes(path, "old");
  ASSERT_TRUE(WriteStringToFileAtomically(nullptr, path, "new contents").ok());
  EXPECT_EQ(ReadBytes(path), "new contents");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"f.json"});
}

TEST(WriteFileAtomically, DiskFullMidWriteKeepsTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.File("f.bin");
  WriteBytes(path, "the old, complete file");
  FaultInjectingFileSystem fs;
  fs.fail_after_bytes = 5;
  Status s = WriteStringToFileAtomically(&fs, path, std::string(1000, 'x'));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unchanged"), std::string::npos) << s.message();
  EXPECT_EQ(ReadBytes(path), "the old, complete file");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"f.bin"});
}

TEST(WriteFileAtomically, FailedRenameKeepsTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.File("f.bin");
  WriteBytes(path, "old");
  FaultInjectingFileSystem fs;
  fs.fail_rename = true;
  Status s = WriteStringToFileAtomically(&fs, path, "new");
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_EQ(ReadBytes(path), "old");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"f.bin"});
}

TEST(WriteFileAtomically, AnErrorFromTheBodyIsReturnedAndCleansUp) {
  ScratchDir dir;
  const std::string path = dir.File("f.bin");
  Status s = WriteFileAtomically(nullptr, path, [](WritableFile& f) {
    Status a = f.Append("partial", 7);
    if (!a.ok()) return a;
    return AbortedError("producer gave up");
  });
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_NE(s.message().find("producer gave up"), std::string::npos);
  EXPECT_TRUE(dir.List().empty());
}

TEST(WriteFileAtomically, MissingDirectoryIsNotFoundNamingThePath) {
  ScratchDir dir;
  const std::string path = dir.File("no/such/dir/f.bin");
  Status s = WriteStringToFileAtomically(nullptr, path, "x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find(path), std::string::npos);
}

TEST(DirectoryOf, SplitsAtTheLastSlash) {
  EXPECT_EQ(DirectoryOf("a/b/c.txt"), "a/b");
  EXPECT_EQ(DirectoryOf("c.txt"), ".");
  EXPECT_EQ(DirectoryOf("/c.txt"), "/");
}

}  // namespace
}  // namespace tierflow

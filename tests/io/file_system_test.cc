// Crash-safe file replacement: a failure at any step before the rename
// leaves the old file byte-for-byte intact and no temporary file behind.
#include <unistd.h>

#include <filesystem>
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

// The rename replaced a link in the target's place (losing it) instead of
// refusing; the target itself was never written, and still is not (issue 40).
TEST(WriteFileAtomically, AtomicWriteOverASymlinkIsRefused) {
  ScratchDir dir, elsewhere;
  const std::string target = elsewhere.File("target");
  WriteBytes(target, "keep me");
  const std::string path = dir.File("f.json");
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  Status s = WriteStringToFileAtomically(nullptr, path, "new");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(path + " is a symbolic link"), std::string::npos) << s.ToString();
  EXPECT_TRUE(std::filesystem::is_symlink(path));
  EXPECT_EQ(ReadBytes(target), "keep me");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"f.json"});
}

// The temporary was opened O_TRUNC without O_NOFOLLOW: a link left where
// the next temporary would go had its target truncated and written.
TEST(WriteFileAtomically, TemporaryNameTakenByALinkIsSkippedNotFollowed) {
  ScratchDir dir, elsewhere;
  const std::string target = elsewhere.File("target");
  WriteBytes(target, "keep me");
  const std::string path = dir.File("f.json");
  // Every name the next temporaries of this process could take (pid and a
  // counter that a test binary has not run past).
  for (int n = 0; n < 4096; ++n) {
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n);
    ASSERT_EQ(::symlink(target.c_str(), tmp.c_str()), 0) << tmp;
  }
  ASSERT_TRUE(WriteStringToFileAtomically(nullptr, path, "new").ok());
  EXPECT_EQ(ReadBytes(path), "new");
  EXPECT_EQ(ReadBytes(target), "keep me");
}

TEST(OpenFileToAppendInPlace, AppendsAndRefusesLinksAndHardLinks) {
  ScratchDir dir, elsewhere;
  const std::string path = dir.File("log.jsonl");
  {
    auto f = OpenFileToAppendInPlace(path, /*truncate=*/false, "log");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append("a\n", 2).ok());
  }
  {
    auto f = OpenFileToAppendInPlace(path, /*truncate=*/false, "log");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append("b\n", 2).ok());
  }
  EXPECT_EQ(ReadBytes(path), "a\nb\n");
  ASSERT_TRUE(OpenFileToAppendInPlace(path, /*truncate=*/true, "log").ok());
  EXPECT_EQ(ReadBytes(path), "");

  const std::string target = elsewhere.File("target");
  WriteBytes(target, "keep me");
  const std::string link = dir.File("link.jsonl"), hard = dir.File("hard.jsonl");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(::link(target.c_str(), hard.c_str()), 0);
  for (const std::string& p : {link, hard}) {
    auto f = OpenFileToAppendInPlace(p, /*truncate=*/true, "log");
    ASSERT_FALSE(f.ok()) << p;
    EXPECT_EQ(f.status().code(), StatusCode::kFailedPrecondition) << f.status().ToString();
    EXPECT_NE(f.status().message().find("log " + p), std::string::npos) << f.status().ToString();
  }
  EXPECT_EQ(ReadBytes(target), "keep me");
}

TEST(DirectoryOf, SplitsAtTheLastSlash) {
  EXPECT_EQ(DirectoryOf("a/b/c.txt"), "a/b");
  EXPECT_EQ(DirectoryOf("c.txt"), ".");
  EXPECT_EQ(DirectoryOf("/c.txt"), "/");
}

}  // namespace
}  // namespace tierflow

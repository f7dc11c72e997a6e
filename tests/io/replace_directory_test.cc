// ReplaceDirectory, the one way a directory (a checkpoint, the final model)
// is replaced. Pins the order of operations a power cut depends on (move the
// old copy aside, rename the new one in, fsync the parent, only then remove
// the old copy), that a failed rename puts the old copy back, and that a
// failed fsync keeps the old copy and says the new one is not yet durable.
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/file_system.h"
#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_io::ReadBytes;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

// Records renames and directory fsyncs ("rename A -> B", "sync D"), and fails
// renames from `fail_rename_from` or into `fail_rename_to`, or every
// directory fsync, on demand.
class RecordingFileSystem final : public FileSystem {
 public:
  std::vector<std::string> ops;
  std::string fail_rename_from;
  std::string fail_rename_to;
  bool fail_sync = false;

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return DefaultFileSystem()->NewWritableFile(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    ops.push_back("rename " + from + " -> " + to);
    if (from == fail_rename_from || to == fail_rename_to) {
      return ErrnoStatus(EIO, "rename " + from + " to " + to);
    }
    return DefaultFileSystem()->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override {
    return DefaultFileSystem()->RemoveFile(path);
  }
  Status SyncDirectory(const std::string& dir) override {
    ops.push_back("sync " + dir);
    if (fail_sync) return ErrnoStatus(EIO, "fsync " + dir);
    return DefaultFileSystem()->SyncDirectory(dir);
  }
};

// dir/NAME holding one file, "f", with `contents`.
void MakeDir(const ScratchDir& dir, const std::string& name, const std::string& contents) {
  fs::create_directories(dir.File(name));
  WriteBytes(dir.File(name + "/f"), contents);
}

std::string Aside(const ScratchDir& dir, const std::string& name) {
  return dir.File("." + name + ".old-" + std::to_string(::getpid()));
}

TEST(ReplaceDirectory, NewTargetIsRenamedInAndTheParentSynced) {
  ScratchDir dir;
  MakeDir(dir, "tmp", "new");
  RecordingFileSystem rec;
  Status s = ReplaceDirectory(&rec, dir.File("tmp"), dir.File("model"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_THAT(rec.ops, ElementsAre("rename " + dir.File("tmp") + " -> " + dir.File("model"),
                                   "sync " + dir.path()));
  EXPECT_EQ(ReadBytes(dir.File("model/f")), "new");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"model"});
}

TEST(ReplaceDirectory, OldTargetIsMovedAsideThenRemovedOnlyAfterTheSync) {
  ScratchDir dir;
  MakeDir(dir, "model", "old");
  MakeDir(dir, "tmp", "new");
  RecordingFileSystem rec;
  Status s = ReplaceDirectory(&rec, dir.File("tmp"), dir.File("model"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_THAT(rec.ops, ElementsAre("rename " + dir.File("model") + " -> " + Aside(dir, "model"),
                                   "rename " + dir.File("tmp") + " -> " + dir.File("model"),
                                   "sync " + dir.path()));
  EXPECT_EQ(ReadBytes(dir.File("model/f")), "new");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"model"});  // the old copy is gone
}

TEST(ReplaceDirectory, FailedRenameInPutsTheOldOneBack) {
  ScratchDir dir;
  MakeDir(dir, "model", "old");
  MakeDir(dir, "tmp", "new");
  RecordingFileSystem rec;
  rec.fail_rename_from = dir.File("tmp");
  Status s = ReplaceDirectory(&rec, dir.File("tmp"), dir.File("model"));
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(dir.File("model")));
  EXPECT_THAT(s.message(), HasSubstr("unchanged"));
  EXPECT_THAT(rec.ops, ElementsAre("rename " + dir.File("model") + " -> " + Aside(dir, "model"),
                                   "rename " + dir.File("tmp") + " -> " + dir.File("model"),
                                   "rename " + Aside(dir, "model") + " -> " + dir.File("model")));
  EXPECT_EQ(ReadBytes(dir.File("model/f")), "old");
  // tmp is the caller's to remove or retry with.
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"model", "tmp"}));
}

TEST(ReplaceDirectory, WhenTheOldOneCannotBePutBackTheErrorSaysWhereItIs) {
  ScratchDir dir;
  MakeDir(dir, "model", "old");
  MakeDir(dir, "tmp", "new");
  RecordingFileSystem rec;
  rec.fail_rename_to = dir.File("model");  // both the rename in and the put-back
  Status s = ReplaceDirectory(&rec, dir.File("tmp"), dir.File("model"));
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("could not be put back and is at " + Aside(dir, "model")));
  EXPECT_EQ(ReadBytes(Aside(dir, "model") + "/f"), "old");
}

TEST(ReplaceDirectory, FailedSyncSaysNotDurableAndKeepsTheOldCopy) {
  ScratchDir dir;
  MakeDir(dir, "model", "old");
  MakeDir(dir, "tmp", "new");
  RecordingFileSystem rec;
  rec.fail_sync = true;
  Status s = ReplaceDirectory(&rec, dir.File("tmp"), dir.File("model"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("not yet durable"));
  EXPECT_EQ(ReadBytes(dir.File("model/f")), "new");
  EXPECT_EQ(ReadBytes(Aside(dir, "model") + "/f"), "old");

  // The next replacement supersedes that leftover instead of failing on it.
  MakeDir(dir, "tmp2", "newer");
  Status again = ReplaceDirectory(nullptr, dir.File("tmp2"), dir.File("model"));
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(ReadBytes(dir.File("model/f")), "newer");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"model"});
}

TEST(ReplaceDirectory, ASymlinkInTheTargetsPlaceIsReplacedNotFollowed) {
  ScratchDir dir;
  MakeDir(dir, "elsewhere", "keep me");
  ASSERT_EQ(::symlink(dir.File("elsewhere").c_str(), dir.File("model").c_str()), 0);
  MakeDir(dir, "tmp", "new");
  Status s = ReplaceDirectory(nullptr, dir.File("tmp"), dir.File("model"));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(fs::is_symlink(dir.File("model")));
  EXPECT_EQ(ReadBytes(dir.File("model/f")), "new");
  EXPECT_EQ(ReadBytes(dir.File("elsewhere/f")), "keep me");
}

}  // namespace
}  // namespace tierflow

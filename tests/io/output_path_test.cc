// The checks on paths tierflow writes (io/output_path.h): containment by
// canonical path, links under an owned directory, and the start-up probe of
// an output file.
#include "io/output_path.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

TEST(CheckNotInside, ComparesCanonicalPathsComponentByComponent) {
  ScratchDir dir, elsewhere;
  fs::create_directories(dir.File("ckpt/optimizer"));
  fs::create_directories(dir.File("ckpt2"));
  const std::string ckpt = dir.File("ckpt");
  fs::create_directory_symlink(ckpt, elsewhere.File("link"));
  // Inside, or the same: as written, with "..", trailing separators, through a
  // link, below a directory not made yet.
  for (const std::string& out :
       {ckpt, ckpt + "/", ckpt + "/optimizer/x", dir.File("ckpt2/../ckpt/x"),
        elsewhere.File("link/x"), ckpt + "/not/made/yet/x"}) {
    Status s = CheckNotInside(out, "--out", ckpt, "the checkpoint");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << out;
    EXPECT_NE(s.message().find("--out " + out), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("the checkpoint " + ckpt), std::string::npos) << s.ToString();
  }
  // Outside: a sibling sharing a prefix of the name, the parent, elsewhere;
  // and nothing is inside an input that does not exist.
  for (const std::string& out : {dir.File("ckpt2/x"), dir.path(), elsewhere.File("x")}) {
    EXPECT_TRUE(CheckNotInside(out, "--out", ckpt, "the checkpoint").ok()) << out;
  }
  EXPECT_TRUE(CheckNotInside(ckpt + "/x", "--out", dir.File("gone"), "input").ok());
  // A file input contains only itself.
  WriteBytes(dir.File("data.txt"), "x");
  EXPECT_FALSE(
      CheckNotInside(dir.File("data.txt"), "--metrics", dir.File("data.txt"), "--data").ok());
}

TEST(CheckNoLinksUnder, RefusesALinkOrAFileOnTheWayButNotWhatIsNotMadeYet) {
  ScratchDir out, elsewhere;
  EXPECT_TRUE(CheckNoLinksUnder(out.path(), out.File("checkpoints/step-1")).ok());
  fs::create_directory_symlink(elsewhere.path(), out.File("checkpoints"));
  Status s = CheckNoLinksUnder(out.path(), out.File("checkpoints/step-1"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(out.File("checkpoints") + " is a symbolic link"), std::string::npos)
      << s.ToString();
  // Even a link that stays inside OUT.
  fs::create_directories(out.File("real"));
  fs::create_directory_symlink(out.File("real"), out.File("model"));
  EXPECT_FALSE(CheckNoLinksUnder(out.path(), out.File("model")).ok());
  WriteBytes(out.File("a-file"), "x");
  s = CheckNoLinksUnder(out.path(), out.File("a-file/sub"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(out.File("a-file") + " is a file, where tierflow keeps a directory"),
            std::string::npos)
      << s.ToString();
  // OUT itself may be a link: it is the user's to name.
  fs::create_directory_symlink(out.path(), elsewhere.File("out-link"));
  EXPECT_TRUE(CheckNoLinksUnder(elsewhere.File("out-link"), elsewhere.File("out-link/real")).ok());
}

TEST(CheckOutputFile, SaysWhatTheWriteWouldFindAndLeavesNothing) {
  ScratchDir dir;
  EXPECT_TRUE(CheckOutputFile(dir.File("new.json"), OutputWrite::kReplace, "--trace").ok());
  EXPECT_TRUE(dir.List().empty()) << "the probe was left behind";
  Status s = CheckOutputFile(dir.File("no/f.json"), OutputWrite::kReplace, "--trace");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("--trace " + dir.File("no/f.json")), std::string::npos);
  fs::create_directories(dir.File("d"));
  EXPECT_EQ(CheckOutputFile(dir.File("d"), OutputWrite::kReplace, "--trace").code(),
            StatusCode::kFailedPrecondition);
  // A hard-linked file is fine to replace (its other names keep the old
  // contents), not to write in place.
  WriteBytes(dir.File("a"), "x");
  ASSERT_EQ(::link(dir.File("a").c_str(), dir.File("b").c_str()), 0);
  EXPECT_TRUE(CheckOutputFile(dir.File("b"), OutputWrite::kReplace, "").ok());
  EXPECT_EQ(CheckOutputFile(dir.File("b"), OutputWrite::kInPlace, "").code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tierflow

// A model's side files: read when present (through a symbolic link, as in a
// Hugging Face cache snapshot), skipped when absent, refused by name past
// the bound, and written back byte for byte.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

#include "io/hf_side_files.h"

namespace tierflow {
namespace {

using testing_common::ReadWholeFile;
using testing_common::ScratchDir;

TEST(HfSideFiles, ReadsThePresentOnesThroughLinksAndWritesThemBack) {
  ScratchDir src, blobs, dst;
  std::ofstream(src / "tokenizer.json") << "{\"version\": \"1.0\"}";
  std::ofstream(blobs / "blob") << "{\"temperature\": 0.6}";
  std::filesystem::create_symlink(blobs / "blob", src / "generation_config.json");
  std::ofstream(src / "model.safetensors") << "weights are not side files";
  auto side = ReadHfSideFiles(src.path());
  ASSERT_TRUE(side.ok()) << side.status().ToString();
  ASSERT_EQ(side->files.size(), 2u);
  EXPECT_EQ(side->files[0].first, "tokenizer.json");
  EXPECT_EQ(side->files[1].first, "generation_config.json");
  ASSERT_TRUE(WriteHfSideFiles(*side, dst.path()).ok());
  EXPECT_EQ(ReadWholeFile(dst / "tokenizer.json"), "{\"version\": \"1.0\"}");
  EXPECT_EQ(ReadWholeFile(dst / "generation_config.json"), "{\"temperature\": 0.6}");
  EXPECT_FALSE(std::filesystem::exists(dst / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::is_symlink(dst / "generation_config.json"));
}

TEST(HfSideFiles, OneAboveTheBoundIsRefusedByName) {
  ScratchDir src;
  {
    std::ofstream big(src / "tokenizer.json");
    big.seekp(static_cast<std::streamoff>(kMaxHfSideFilesBytes));
    big.put('x');  // a sparse file one byte past the bound
  }
  auto side = ReadHfSideFiles(src.path());
  ASSERT_FALSE(side.ok());
  EXPECT_NE(side.status().message().find("tokenizer.json"), std::string::npos)
      << side.status().ToString();
  ScratchDir dir_in_place;
  std::filesystem::create_directory(dir_in_place / "vocab.json");
  EXPECT_FALSE(ReadHfSideFiles(dir_in_place.path()).ok());
}

}  // namespace
}  // namespace tierflow

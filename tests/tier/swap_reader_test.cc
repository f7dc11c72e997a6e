// The read-only swap readers against sets written by StateStore: whole
// tensors read back over one and several directories, a flipped data byte
// is reported with file, tensor and byte range, and nothing is written.
#include "tier/swap_reader.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "offload/aligned_buffer.h"
#include "offload/state_store.h"
#include "tests/tier/tier_test_util.h"

namespace tierflow::tier {
namespace {
using tier_test::TempDir;

struct KeptSet {
  std::vector<std::string> dirs;
  std::string run_id = "test-set";
  std::vector<std::vector<uint8_t>> data;  // per tensor
};

// Two tensors (one spanning several 4 KiB blocks, one partial block) in `num_dirs` directories.
void WriteKeptSet(const TempDir& root, uint32_t num_dirs, KeptSet* set) {
  offload::StateStoreOptions o;
  for (uint32_t d = 0; d < num_dirs; ++d) {
    set->dirs.push_back(root / ("d" + std::to_string(d)));
    std::filesystem::create_directories(set->dirs.back());
  }
  o.directories = set->dirs;
  o.run_id = set->run_id;
  o.block_size_bytes = 4096;
  o.io_mode = offload::IoMode::kBuffered;
  o.spare_bytes_per_directory = 4096;
  std::vector<offload::TensorSpec> specs = {{"a/master", DType::kF32, 5 * 4096 + 100},
                                            {"b/exp_avg", DType::kF32, 300}};
  auto store = offload::StateStore::Create(o, specs);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (uint32_t t = 0; t < specs.size(); ++t) {
    std::vector<uint8_t> bytes(specs[t].num_bytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + t);
    auto buf = offload::AlignedBuffer::Allocate(offload::RoundUp(bytes.size(), 4096)).value();
    std::memcpy(buf.data(), bytes.data(), bytes.size());
    ASSERT_TRUE((*store)->Write(t, buf.data()).ok());
    set->data.push_back(std::move(bytes));
  }
  ASSERT_TRUE((*store)->CloseKeepingFiles().ok());
}

TEST(SwapReader, ReadsWhatTheStoreWroteOverSeveralDirectories) {
  for (uint32_t num_dirs : {1u, 3u}) {
    TempDir root;
    KeptSet set;
    WriteKeptSet(root, num_dirs, &set);
    auto reader = SwapSetReader::Open(set.dirs, set.run_id);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    ASSERT_EQ((*reader)->tensors().size(), 2u);
    std::vector<uint8_t> got(set.data[0].size());
    ASSERT_TRUE((*reader)->Read("a/master", got.data(), got.size()).ok());
    EXPECT_EQ(got, set.data[0]);
    got.resize(set.data[1].size());
    ASSERT_TRUE((*reader)->Read("b/exp_avg", got.data(), got.size()).ok());
    EXPECT_EQ(got, set.data[1]);
    EXPECT_EQ((*reader)->Read("nope", got.data(), got.size()).code(), StatusCode::kNotFound);
    EXPECT_EQ((*reader)->Read("b/exp_avg", got.data(), 7).code(), StatusCode::kInvalidArgument);
    for (const auto& f : (*reader)->files()) {
      uint64_t checked = 0;
      EXPECT_TRUE(f->VerifyBlocks(&checked).empty());
      EXPECT_EQ(checked, f->num_blocks_written());
      EXPECT_EQ(f->num_blocks_written(), f->header().num_logical_blocks);
    }
    // Directories in another order or a missing one are refused.
    if (num_dirs > 1) {
      std::vector<std::string> swapped = {set.dirs[1], set.dirs[0], set.dirs[2]};
      EXPECT_FALSE(SwapSetReader::Open(swapped, set.run_id).ok());
      std::vector<std::string> fewer = {set.dirs[0], set.dirs[1]};
      EXPECT_EQ(SwapSetReader::Open(fewer, set.run_id).status().code(), StatusCode::kDataLoss);
    }
  }
}

TEST(SwapReader, CorruptBlockIsReportedWithTensorAndRange) {
  TempDir root;
  KeptSet set;
  WriteKeptSet(root, 1, &set);
  const std::string file = offload::SwapFilePath(set.dirs[0], set.run_id, 0);
  uint64_t offset = 0;
  {
    auto view = SwapFileView::Open(file);
    ASSERT_TRUE(view.ok());
    const auto& h = (*view)->header();
    // Block 2 of "a/master": tensor bytes [8192, 12288).
    const auto& t = h.tensors[0];
    const uint32_t physical = (*view)->table().physical[t.first_local_block + 2];
    offset = h.data_offset_bytes + uint64_t{physical} * h.block_size_bytes + 17;
  }
  const std::string before = tier_test::ReadFile(file);
  tier_test::FlipByte(file, offset);
  auto view = SwapFileView::Open(file);
  ASSERT_TRUE(view.ok());
  uint64_t checked = 0;
  auto problems = (*view)->VerifyBlocks(&checked);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].file, file);
  EXPECT_EQ(problems[0].tensor, "a/master");
  EXPECT_EQ(problems[0].tensor_begin_bytes, 8192u);
  EXPECT_EQ(problems[0].tensor_end_bytes, 12288u);
  EXPECT_EQ(problems[0].file_offset_bytes, offset - 17);
  auto reader = SwapSetReader::Open(set.dirs, set.run_id);
  ASSERT_TRUE(reader.ok());
  std::vector<uint8_t> got(set.data[0].size());
  Status s = (*reader)->Read("a/master", got.data(), got.size());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("[8192, 12288)"), std::string::npos) << s.message();
  // Reading never wrote: only the flipped byte differs.
  std::string after = tier_test::ReadFile(file);
  after[offset] ^= 0x10;
  EXPECT_EQ(after, before);
}

TEST(SwapReader, CorruptHeaderIsDataLoss) {
  TempDir root;
  KeptSet set;
  WriteKeptSet(root, 1, &set);
  const std::string file = offload::SwapFilePath(set.dirs[0], set.run_id, 0);
  tier_test::FlipByte(file, 40);
  auto view = SwapFileView::Open(file);
  EXPECT_EQ(view.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(view.status().message().find(file), std::string::npos);
}

}  // namespace
}  // namespace tierflow::tier

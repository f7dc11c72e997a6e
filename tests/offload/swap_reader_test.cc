// The read-only swap readers against sets written by StateStore: whole
// tensors read back over one and several directories, a flipped data byte
// is reported with file, tensor and byte range, and nothing is written.
// Block maps that are invalid (a physical block shared by two logical
// blocks, or past the file's blocks) are refused by the reader and by
// StateStore::Open alike, through ReadSwapFileMetadata.
#include "offload/swap_reader.h"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "offload/aligned_buffer.h"
#include "offload/state_store.h"
#include "offload/swap_set.h"
#include "tests/common/scratch_dir.h"
#include "tests/offload/offload_test_util.h"

namespace tierflow::offload {
namespace {

using TempDir = testing_util::ScratchDir;

using testing_common::FlipByte;
using testing_common::ReadWholeFile;

struct KeptSet {
  std::vector<std::string> dirs;
  std::string run_id = "test-set";
  std::vector<std::vector<uint8_t>> data;  // per tensor
};

// The options the kept set is created with (and reopened with).
StateStoreOptions KeptSetOptions(const KeptSet& set) {
  StateStoreOptions o;
  o.directories = set.dirs;
  o.run_id = set.run_id;
  o.block_size_bytes = 4096;
  o.io_mode = IoMode::kBuffered;
  o.spare_bytes_per_directory = 4096;
  return o;
}

// Two tensors (one spanning several 4 KiB blocks, one partial block) in `num_dirs` directories.
void WriteKeptSet(const TempDir& root, uint32_t num_dirs, KeptSet* set) {
  for (uint32_t d = 0; d < num_dirs; ++d) {
    set->dirs.push_back(root.path() + "/d" + std::to_string(d));
    std::filesystem::create_directories(set->dirs.back());
  }
  const StateStoreOptions o = KeptSetOptions(*set);
  std::vector<TensorSpec> specs = {{"a/master", DType::kF32, 5 * 4096 + 100},
                                   {"b/exp_avg", DType::kF32, 300}};
  auto store = StateStore::Create(o, specs);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (uint32_t t = 0; t < specs.size(); ++t) {
    std::vector<uint8_t> bytes(specs[t].num_bytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + t);
    auto buf = AlignedBuffer::Allocate(RoundUp(bytes.size(), 4096)).value();
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
    // Byte ranges, within a block, across blocks (and directories), at the end.
    const std::vector<uint8_t>& a = set.data[0];
    for (const auto& [offset, count] : std::vector<std::pair<uint64_t, uint64_t>>{
             {0, 1}, {5, 100}, {4000, 300}, {a.size() - 9, 9}, {0, a.size()}}) {
      std::vector<uint8_t> part(count);
      ASSERT_TRUE((*reader)->ReadRange("a/master", offset, part.data(), count).ok());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), a.begin() + static_cast<ptrdiff_t>(offset)))
          << offset << " +" << count;
    }
    EXPECT_EQ((*reader)->ReadRange("a/master", a.size() - 8, got.data(), 9).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ((*reader)->ReadRange("nope", 0, got.data(), 1).code(), StatusCode::kNotFound);
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
  const std::string file = SwapFilePath(set.dirs[0], set.run_id, 0);
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
  const std::string before = ReadWholeFile(file);
  FlipByte(file, offset);
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
  std::string after = ReadWholeFile(file);
  after[offset] ^= 0x10;
  EXPECT_EQ(after, before);
}

TEST(SwapReader, CorruptHeaderIsDataLoss) {
  TempDir root;
  KeptSet set;
  WriteKeptSet(root, 1, &set);
  const std::string file = SwapFilePath(set.dirs[0], set.run_id, 0);
  FlipByte(file, 40);
  auto view = SwapFileView::Open(file);
  EXPECT_EQ(view.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(view.status().message().find(file), std::string::npos);
}

// Commits a new block table to `file`: its current map changed by `edit`,
// with a higher sequence so that it is the copy every reader picks.
void CommitEditedTable(const std::string& file, const std::function<void(BlockTable*)>& edit) {
  auto view = SwapFileView::Open(file);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const SwapFileHeader& h = (*view)->header();
  BlockTable table = (*view)->table();
  ++table.sequence;
  edit(&table);
  std::vector<uint8_t> bytes(BlockTableCopySize(h.num_logical_blocks));
  EncodeBlockTable(table, bytes);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << file;
  const ssize_t n =
      ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(h.block_table_offset_bytes));
  ::close(fd);
  ASSERT_EQ(n, static_cast<ssize_t>(bytes.size()));
}

// Opening `set` fails the same way in the read-only reader and in
// StateStore::Open (one decoding path), with a message holding `expected`.
void ExpectBothRefuse(const KeptSet& set, const std::string& expected) {
  const std::string file = SwapFilePath(set.dirs[0], set.run_id, 0);
  auto view = SwapFileView::Open(file);
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(view.status().message().find(file), std::string::npos) << view.status().message();
  EXPECT_NE(view.status().message().find(expected), std::string::npos) << view.status().message();
  EXPECT_EQ(SwapSetReader::Open(set.dirs, set.run_id).status().code(), StatusCode::kDataLoss);
  auto store = StateStore::Open(KeptSetOptions(set));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store.status().message(), view.status().message());
}

TEST(SwapReader, TableRewriteWithTheSameMapStillOpens) {
  // The control for the tests below: committing a table this way is sound,
  // so what they see refused is the map, not the rewrite.
  TempDir root;
  KeptSet set;
  WriteKeptSet(root, 1, &set);
  const std::string file = SwapFilePath(set.dirs[0], set.run_id, 0);
  CommitEditedTable(file, [](BlockTable*) {});
  auto reader = SwapSetReader::Open(set.dirs, set.run_id);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<uint8_t> got(set.data[0].size());
  ASSERT_TRUE((*reader)->Read("a/master", got.data(), got.size()).ok());
  EXPECT_EQ(got, set.data[0]);
  auto store = StateStore::Open(KeptSetOptions(set));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->CloseKeepingFiles().ok());
}

TEST(SwapFileView, RejectsSharedPhysicalBlocks) {
  // Logical block 1 mapped onto logical block 0's physical block: once
  // both are on one block, a write to either changes the other.
  TempDir root;
  KeptSet set;
  WriteKeptSet(root, 1, &set);
  const std::string file = SwapFilePath(set.dirs[0], set.run_id, 0);
  CommitEditedTable(file, [](BlockTable* t) {
    t->physical[1] = t->physical[0];
    t->crc[1] = t->crc[0];  // each entry's checksum matches its block's bytes
  });
  ExpectBothRefuse(set, "maps logical block 1 to invalid or shared physical block");
}

TEST(SwapFileView, RejectsPhysicalBlockPastTheFile) {
  // The reader used to take such a block for "never written" and skip it.
  TempDir root;
  KeptSet set;
  WriteKeptSet(root, 1, &set);
  const std::string file = SwapFilePath(set.dirs[0], set.run_id, 0);
  uint64_t num_physical = 0;
  {
    auto view = SwapFileView::Open(file);
    ASSERT_TRUE(view.ok());
    num_physical = (*view)->header().num_physical_blocks;
  }
  ASSERT_LT(num_physical, kUnmappedBlock);
  CommitEditedTable(file,
                    [&](BlockTable* t) { t->physical[2] = static_cast<uint32_t>(num_physical); });
  ExpectBothRefuse(set, "maps logical block 2 to invalid or shared physical block " +
                            std::to_string(num_physical));
}

TEST(SwapReader, CheckBlockMapAcceptsUnmappedAndRefusesWrongSize) {
  SwapFileHeader h;
  h.num_logical_blocks = 3;
  h.num_physical_blocks = 4;
  BlockTable t;
  t.physical = {kUnmappedBlock, 3, kUnmappedBlock};
  t.crc = {0, 0, 0};
  EXPECT_TRUE(CheckBlockMap(h, t, "f").ok());  // unmapped blocks share nothing
  t.physical.push_back(0);
  t.crc.push_back(0);
  EXPECT_EQ(CheckBlockMap(h, t, "f").code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tierflow::offload

// The state store over the configuration matrix (direct/buffered, fixed
// buffers on/off, queue depth 1/32, one/two directories), partial ranges,
// rewrites through the spare blocks, and the swap set's life cycle: clean
// close removes everything, stale sets are refused, kept sets reopen,
// corrupt or missing files are named.
#include "offload/state_store.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "tests/offload/offload_test_util.h"

namespace tierflow::offload {
namespace {

namespace fs = std::filesystem;
using testing_util::FillPattern;
using testing_util::MakeBuffer;
using testing_util::ScratchDir;

constexpr uint32_t kBlock = 256 << 10;

std::vector<TensorSpec> SampleTensors() {
  return {
      {"layers.0.mlp.up/exp_avg", DType::kF32, 3 * kBlock + 4100},  // ragged tail
      {"layers.0.mlp.up/exp_avg_sq", DType::kF32, 4 * kBlock},
      {"layers.0.mlp.up/master", DType::kF32, kBlock / 2},  // smaller than a block
  };
}

StateStoreOptions BaseOptions(std::vector<std::string> dirs) {
  StateStoreOptions o;
  o.directories = std::move(dirs);
  o.block_size_bytes = kBlock;
  o.spare_bytes_per_directory = 8 * kBlock;
  return o;
}

std::unique_ptr<StateStore> MustCreate(const StateStoreOptions& o,
                                       const std::vector<TensorSpec>& t = SampleTensors()) {
  StatusOr<std::unique_ptr<StateStore>> s = StateStore::Create(o, t);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

bool SwapRootExists(const std::string& dir) { return fs::exists(fs::path(dir) / kSwapRootName); }

// ---- the matrix ----

using MatrixParam = std::tuple<IoMode, bool /*fixed*/, uint32_t /*depth*/, int /*dirs*/>;

class StateStoreMatrixTest : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(StateStoreMatrixTest, WritesReadBackExactlyAndCloseRemovesTheFiles) {
  auto [mode, fixed, depth, num_dirs] = GetParam();
  ScratchDir a, b;
  std::vector<std::string> dirs = {a.path()};
  if (num_dirs == 2) dirs.push_back(b.path());
  StateStoreOptions o = BaseOptions(dirs);
  o.io_mode = mode;
  o.queue_depth = depth;
  auto store = MustCreate(o);
  ASSERT_NE(store, nullptr);

  std::vector<AlignedBuffer> src, dst;
  for (TensorId t = 0; t < store->num_tensors(); ++t) {
    src.push_back(MakeBuffer(store->tensor(t).num_bytes, 100 + t));
    dst.push_back(MakeBuffer(store->tensor(t).num_bytes, 200 + t));
  }
  if (fixed) {
    std::vector<iovec> iov;
    for (auto& x : src) iov.push_back({x.data(), x.num_bytes()});
    for (auto& x : dst) iov.push_back({x.data(), x.num_bytes()});
    Status reg = store->RegisterBuffers(iov);
    ASSERT_TRUE(reg.ok()) << reg.ToString();
    EXPECT_TRUE(store->stats().engine.fixed_buffers_registered);
  }
  // All writes in flight at once, then all reads.
  std::vector<IoTicket> tickets;
  for (TensorId t = 0; t < store->num_tensors(); ++t) {
    StatusOr<IoTicket> w = store->WriteAsync(t, src[t].data(), 0, store->tensor(t).num_bytes);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    tickets.push_back(*w);
  }
  for (IoTicket& t : tickets) ASSERT_TRUE(t.Wait().ok());
  tickets.clear();
  for (TensorId t = 0; t < store->num_tensors(); ++t) {
    StatusOr<IoTicket> r = store->ReadAsync(t, dst[t].data(), 0, store->tensor(t).num_bytes);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    tickets.push_back(*r);
  }
  for (IoTicket& t : tickets) {
    Status s = t.Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(t.done());
  }
  for (TensorId t = 0; t < store->num_tensors(); ++t) {
    ASSERT_EQ(std::memcmp(src[t].data(), dst[t].data(), store->tensor(t).num_bytes), 0)
        << store->tensor(t).name;
  }

  // Rewrite a middle slice of tensor 1 (a sub-group): only it changes.
  FillPattern(src[1].data() + kBlock, 2 * kBlock, 999);
  ASSERT_TRUE(store->WriteAsync(1, src[1].data() + kBlock, kBlock, 2 * kBlock)->Wait().ok());
  ASSERT_TRUE(store->Read(1, dst[1].data()).ok());
  EXPECT_EQ(std::memcmp(src[1].data(), dst[1].data(), 4 * kBlock), 0);
  // Read just the ragged tail block of tensor 0.
  uint64_t tail = 3 * kBlock;
  AlignedBuffer part = MakeBuffer(kBlock, 5);
  ASSERT_TRUE(
      store->ReadAsync(0, part.data(), tail, store->tensor(0).num_bytes - tail)->Wait().ok());
  EXPECT_EQ(std::memcmp(part.data(), src[0].data() + tail, 4100), 0);

  StateStoreStats st = store->stats();
  EXPECT_EQ(st.num_checksum_mismatches, 0u);
  EXPECT_EQ(st.engine.num_failed, 0u);
  std::vector<std::string> paths = store->swap_file_paths();
  ASSERT_EQ(paths.size(), static_cast<size_t>(num_dirs));
  for (const std::string& p : paths) EXPECT_TRUE(fs::exists(p)) << p;
  ASSERT_TRUE(store->Close().ok());
  for (const std::string& d : dirs) EXPECT_FALSE(SwapRootExists(d)) << d;
}

std::string MatrixName(const ::testing::TestParamInfo<MatrixParam>& info) {
  const auto& [mode, fixed, depth, dirs] = info.param;
  return std::string(mode == IoMode::kDirect ? "Direct" : "Buffered") +
         (fixed ? "Fixed" : "Unfixed") + "Qd" + std::to_string(depth) + "Dirs" +
         std::to_string(dirs);
}

INSTANTIATE_TEST_SUITE_P(Matrix, StateStoreMatrixTest,
                         ::testing::Combine(::testing::Values(IoMode::kDirect, IoMode::kBuffered),
                                            ::testing::Bool(), ::testing::Values(1u, 32u),
                                            ::testing::Values(1, 2)),
                         MatrixName);

// ---- striping and layout ----

TEST(StateStore, TwoDirectoriesShareTheData) {
  ScratchDir a, b;
  auto store = MustCreate(BaseOptions({a.path(), b.path()}), {{"big", DType::kF32, 8 * kBlock}});
  AlignedBuffer src = MakeBuffer(8 * kBlock, 1);
  ASSERT_TRUE(store->Write(0, src.data()).ok());
  // Each file holds half of the blocks (plus header and spare), so both grew alike.
  std::vector<std::string> p = store->swap_file_paths();
  EXPECT_EQ(fs::file_size(p[0]), fs::file_size(p[1]));
  EXPECT_EQ(store->stats().engine.bytes_written, 8ull * kBlock);
}

// ---- argument checks ----

TEST(StateStore, BadRangesAndBuffersAreInvalidArgument) {
  ScratchDir a;
  auto store = MustCreate(BaseOptions({a.path()}));
  AlignedBuffer buf = MakeBuffer(8 * kBlock, 1);
  EXPECT_EQ(store->WriteAsync(0, buf.data(), 4096, kBlock).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteAsync(0, buf.data(), 0, kBlock + 4096).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteAsync(0, buf.data(), 0, 100 * kBlock).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteAsync(0, buf.data(), 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteAsync(7, buf.data(), 0, kBlock).status().code(),
            StatusCode::kInvalidArgument);
  Status unaligned = store->WriteAsync(0, buf.data() + 8, 0, kBlock).status();
  EXPECT_EQ(unaligned.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unaligned.message().find("aligned"), std::string::npos);
  EXPECT_EQ(store->Find("layers.0.mlp.up/exp_avg_sq").value(), 1u);
  Status missing = store->Find("nope").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("nope"), std::string::npos);
}

TEST(StateStore, ReadingNeverWrittenBlocksIsAnErrorNamingTheTensor) {
  ScratchDir a;
  auto store = MustCreate(BaseOptions({a.path()}));
  AlignedBuffer buf = MakeBuffer(4 * kBlock, 1);
  ASSERT_TRUE(store->WriteAsync(1, buf.data(), 0, kBlock)->Wait().ok());
  Status s = store->ReadAsync(1, buf.data(), 0, 2 * kBlock).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layers.0.mlp.up/exp_avg_sq"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("block 1"), std::string::npos) << s.message();
  // The refused read left nothing pinned: a rewrite and read still work.
  ASSERT_TRUE(store->WriteAsync(1, buf.data(), 0, kBlock)->Wait().ok());
  ASSERT_TRUE(store->ReadAsync(1, buf.data(), 0, kBlock)->Wait().ok());
}

TEST(StateStore, CreateErrorsLeaveNothingBehind) {
  ScratchDir a;
  StateStoreOptions o = BaseOptions({a.path()});
  EXPECT_EQ(StateStore::Create(o, {{"x", DType::kF32, 10}, {"x", DType::kF32, 10}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StateStore::Create(o, {{"x", DType::kF32, 0}}).status().code(),
            StatusCode::kInvalidArgument);
  StateStoreOptions bad_block = o;
  bad_block.block_size_bytes = 1000;
  EXPECT_EQ(StateStore::Create(bad_block, SampleTensors()).status().code(),
            StatusCode::kInvalidArgument);
  StateStoreOptions twice = BaseOptions({a.path(), a.path()});
  EXPECT_EQ(StateStore::Create(twice, SampleTensors()).status().code(),
            StatusCode::kInvalidArgument);
  StateStoreOptions missing = BaseOptions({a.path(), a.path() + "/no/such/dir"});
  Status s = StateStore::Create(missing, SampleTensors()).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no/such/dir"), std::string::npos);
  EXPECT_FALSE(SwapRootExists(a.path())) << "the first directory's half-made set must be removed";
}

TEST(StateStore, DirectModeOnTmpfsIsUnavailableAndBufferedWorksWhenChosen) {
  struct statfs sfs {};
  if (statfs("/dev/shm", &sfs) != 0 || sfs.f_type != TMPFS_MAGIC)
    TIERFLOW_SKIP_WITHOUT("tmpfs") << "/dev/shm is not tmpfs here";
  ScratchDir shm("/dev/shm");
  StateStoreOptions o = BaseOptions({shm.path()});
  Status s = StateStore::Create(o, SampleTensors()).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("--nvme-buffered"), std::string::npos) << s.message();
  EXPECT_FALSE(SwapRootExists(shm.path()));
  o.io_mode = IoMode::kBuffered;
  auto store = MustCreate(o);
  ASSERT_NE(store, nullptr);
  AlignedBuffer src = MakeBuffer(4 * kBlock, 3), dst = MakeBuffer(4 * kBlock, 4);
  ASSERT_TRUE(store->Write(1, src.data()).ok());
  ASSERT_TRUE(store->Read(1, dst.data()).ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 4 * kBlock), 0);
  EXPECT_EQ(store->stats().io_mode, IoMode::kBuffered);
}

// ---- rewrites and the spare blocks ----

TEST(StateStore, RewritesCycleThroughTheSpareBlocksWithoutLosingData) {
  ScratchDir a;
  StateStoreOptions o = BaseOptions({a.path()});
  o.spare_bytes_per_directory = 2 * kBlock;
  auto store = MustCreate(o, {{"t", DType::kF32, 2 * kBlock}, {"u", DType::kF32, 2 * kBlock}});
  AlignedBuffer v[4] = {MakeBuffer(2 * kBlock, 1), MakeBuffer(2 * kBlock, 2),
                        MakeBuffer(2 * kBlock, 3), MakeBuffer(2 * kBlock, 4)};
  ASSERT_TRUE(store->Write(0, v[0].data()).ok());
  ASSERT_TRUE(store->Write(1, v[1].data()).ok());
  // Four rewrites in flight need more than the two spare blocks: later ones
  // wait for earlier ones to commit instead of failing or deadlocking.
  for (int round = 0; round < 5; ++round) {
    std::vector<IoTicket> t;
    for (int i = 0; i < 4; ++i) {
      StatusOr<IoTicket> w = store->WriteAsync(i % 2, v[(i + round) % 4].data(), 0, 2 * kBlock);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      t.push_back(*w);
    }
    for (IoTicket& x : t) ASSERT_TRUE(x.Wait().ok());
  }
  AlignedBuffer out = MakeBuffer(2 * kBlock, 9);
  ASSERT_TRUE(store->Read(0, out.data()).ok());
  EXPECT_EQ(std::memcmp(out.data(), v[(2 + 4) % 4].data(), 2 * kBlock), 0);
  // One rewrite larger than the spare can never get its blocks: refused up front.
  StateStoreOptions tiny = BaseOptions({a.path()});
  tiny.spare_bytes_per_directory = kBlock;
  tiny.run_id = "tiny";
  auto small = MustCreate(tiny, {{"t", DType::kF32, 2 * kBlock}});
  ASSERT_TRUE(small->Write(0, v[0].data()).ok());
  Status s = small->WriteAsync(0, v[1].data(), 0, 2 * kBlock).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("spare"), std::string::npos) << s.message();
  ASSERT_TRUE(small->WriteAsync(0, v[1].data(), 0, kBlock)->Wait().ok());
}

TEST(StateStore, ReadsAheadAndWritesBehindFromSeveralThreads) {
  ScratchDir a, b;
  StateStoreOptions o = BaseOptions({a.path(), b.path()});
  o.num_rings = 2;
  o.queue_depth = 8;
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 8; ++i) specs.push_back({"t" + std::to_string(i), DType::kF32, 3 * kBlock});
  auto store = MustCreate(o, specs);
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      // Each thread owns tensors th and th+4: write both, then read-modify-write rounds.
      AlignedBuffer x = MakeBuffer(3 * kBlock, th), y = MakeBuffer(3 * kBlock, th + 10);
      AlignedBuffer in = MakeBuffer(3 * kBlock, 0);
      for (int round = 0; round < 6; ++round) {
        AlignedBuffer& src = round % 2 ? y : x;
        StatusOr<IoTicket> w1 = store->WriteAsync(th, src.data(), 0, 3 * kBlock);
        StatusOr<IoTicket> w2 = store->WriteAsync(th + 4, src.data(), 0, 3 * kBlock);
        if (!w1.ok() || !w2.ok() || !w1->Wait().ok() || !w2->Wait().ok()) {
          results[th] = InternalError("write failed");
          return;
        }
        StatusOr<IoTicket> r = store->ReadAsync(round % 2 ? th + 4 : th, in.data(), 0, 3 * kBlock);
        if (!r.ok() || !r->Wait().ok() || std::memcmp(in.data(), src.data(), 3 * kBlock) != 0) {
          results[th] = InternalError("read back differs in round " + std::to_string(round));
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(StateStore, ReadsRacingRewritesSeeOneWholeVersionNeverRecycledBlocks) {
  // Two spare blocks: every rewrite reuses the blocks the previous version
  // just freed, unless a read still in flight holds them.
  ScratchDir a;
  StateStoreOptions o = BaseOptions({a.path()});
  o.spare_bytes_per_directory = 2 * kBlock;
  o.queue_depth = 8;
  auto store = MustCreate(o, {{"t", DType::kF32, 2 * kBlock}});
  AlignedBuffer v[3] = {MakeBuffer(2 * kBlock, 1), MakeBuffer(2 * kBlock, 2),
                        MakeBuffer(2 * kBlock, 3)};
  AlignedBuffer out[2] = {MakeBuffer(2 * kBlock, 0), MakeBuffer(2 * kBlock, 0)};
  ASSERT_TRUE(store->Write(0, v[0].data()).ok());
  for (int round = 0; round < 40; ++round) {
    IoTicket r1 = *store->ReadAsync(0, out[0].data(), 0, 2 * kBlock);
    IoTicket w = *store->WriteAsync(0, v[(round + 1) % 3].data(), 0, 2 * kBlock);
    IoTicket r2 = *store->ReadAsync(0, out[1].data(), 0, 2 * kBlock);
    ASSERT_TRUE(w.Wait().ok());
    for (int i = 0; i < 2; ++i) {
      Status s = (i == 0 ? r1 : r2).Wait();
      ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.ToString();
      bool whole = false;
      for (const AlignedBuffer& x : v)
        whole = whole || std::memcmp(out[i].data(), x.data(), 2 * kBlock) == 0;
      ASSERT_TRUE(whole) << "round " << round << " read " << i << " mixes versions";
    }
    // The read issued before the write sees the old version.
    ASSERT_EQ(std::memcmp(out[0].data(), v[round % 3].data(), 2 * kBlock), 0) << "round " << round;
  }
}

// ---- life cycle of the swap set ----

TEST(StateStore, DestructorRemovesTheSetLikeClose) {
  ScratchDir a;
  {
    auto store = MustCreate(BaseOptions({a.path()}));
    AlignedBuffer src = MakeBuffer(4 * kBlock, 1);
    ASSERT_TRUE(store->Write(1, src.data()).ok());
    EXPECT_TRUE(SwapRootExists(a.path()));
  }
  EXPECT_FALSE(SwapRootExists(a.path()));
}

TEST(StateStore, StaleSetIsRefusedNamedAndCleanable) {
  ScratchDir a;
  StateStoreOptions o = BaseOptions({a.path()});
  o.run_id = "crashed-run";
  auto first = MustCreate(o);
  ASSERT_TRUE(first->CloseKeepingFiles().ok());  // as a crash leaves it (lock released)
  StateStoreOptions next = BaseOptions({a.path()});
  next.run_id = "next-run";
  Status s = StateStore::Create(next, SampleTensors()).status();
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(RunDirectory(a.path(), "crashed-run")), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("tierflow tier clean"), std::string::npos) << s.message();
  // Not added to: the stale set is exactly as it was, and no new set appeared.
  StatusOr<std::vector<SwapSetInfo>> sets = ListSwapSets(a.path());
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 1u);
  EXPECT_EQ((*sets)[0].state, SwapSetState::kStale);
  ASSERT_EQ(RemoveStaleSwapSets(a.path()).value(), 1u);
  auto store = MustCreate(next);
  ASSERT_NE(store, nullptr);
}

TEST(StateStore, LiveSetsOfOtherRunsCoexistAndCannotBeOpened) {
  ScratchDir a;
  StateStoreOptions o1 = BaseOptions({a.path()}), o2 = BaseOptions({a.path()});
  o1.run_id = "run-1";
  o2.run_id = "run-2";
  auto s1 = MustCreate(o1);
  auto s2 = MustCreate(o2);
  ASSERT_NE(s2, nullptr);
  Status open = StateStore::Open(o1).status();
  EXPECT_EQ(open.code(), StatusCode::kFailedPrecondition) << open.ToString();
  EXPECT_EQ(StateStore::Create(o1, SampleTensors()).status().code(),
            StatusCode::kFailedPrecondition);
  StatusOr<std::vector<SwapSetInfo>> sets = ListSwapSets(a.path());
  ASSERT_EQ(sets->size(), 2u);
  for (const SwapSetInfo& s : *sets) EXPECT_EQ(s.state, SwapSetState::kLive);
}

TEST(StateStore, KeptSetReopensWithItsDataAndIsRemovedByTheNewOwner) {
  ScratchDir a, b;
  StateStoreOptions o = BaseOptions({a.path(), b.path()});
  o.run_id = "resume-me";
  AlignedBuffer src = MakeBuffer(4 * kBlock, 42), dst = MakeBuffer(4 * kBlock, 0);
  {
    auto store = MustCreate(o);
    ASSERT_TRUE(store->Write(1, src.data()).ok());
    ASSERT_TRUE(store->CloseKeepingFiles().ok());
  }
  EXPECT_TRUE(SwapRootExists(a.path()));
  StatusOr<std::unique_ptr<StateStore>> reopened = StateStore::Open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto& store = *reopened;
  EXPECT_EQ(store->num_tensors(), 3u);
  EXPECT_EQ(store->block_size_bytes(), kBlock);
  TensorId id = store->Find("layers.0.mlp.up/exp_avg_sq").value();
  ASSERT_TRUE(store->Read(id, dst.data()).ok());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 4 * kBlock), 0);
  EXPECT_EQ(store->ReadAsync(0, dst.data(), 0, kBlock).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->Close().ok());
  EXPECT_FALSE(SwapRootExists(a.path()));
  EXPECT_FALSE(SwapRootExists(b.path()));
}

// Flips one byte of `path` at `offset` behind the store's back.
void CorruptByte(const std::string& path, uint64_t offset) {
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, static_cast<off_t>(offset)), 1);
  byte ^= 0x01;
  ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(offset)), 1);
  fsync(fd);
  close(fd);
}

SwapFileHeader ReadHeader(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  std::vector<uint8_t> bytes(1 << 16);
  ssize_t n = pread(fd, bytes.data(), bytes.size(), 0);
  close(fd);
  EXPECT_GT(n, 0);
  return DecodeSwapHeader(bytes, path).value();
}

class KeptSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_ = BaseOptions({a_.path(), b_.path()});
    o_.run_id = "kept";
    auto store = MustCreate(o_);
    src_ = MakeBuffer(4 * kBlock, 7);
    ASSERT_TRUE(store->Write(1, src_.data()).ok());
    ASSERT_TRUE(store->Sync().ok());
    ASSERT_TRUE(store->CloseKeepingFiles().ok());
    paths_ = {SwapFilePath(a_.path(), "kept", 0), SwapFilePath(b_.path(), "kept", 1)};
  }
  ScratchDir a_, b_;
  StateStoreOptions o_;
  AlignedBuffer src_;
  std::vector<std::string> paths_;
};

TEST_F(KeptSetTest, CorruptHeaderIsDataLossNamingTheFile) {
  CorruptByte(paths_[1], 40);
  Status s = StateStore::Open(o_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(paths_[1]), std::string::npos) << s.message();
  EXPECT_TRUE(fs::exists(paths_[1])) << "a failed Open must not remove evidence";
}

TEST_F(KeptSetTest, MissingFileIsNotFoundNamingIt) {
  fs::remove(paths_[1]);
  Status s = StateStore::Open(o_).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find(paths_[1]), std::string::npos) << s.message();
}

TEST_F(KeptSetTest, TruncatedFileIsDataLoss) {
  fs::resize_file(paths_[0], fs::file_size(paths_[0]) / 2);
  Status s = StateStore::Open(o_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

TEST_F(KeptSetTest, CorruptNewestBlockTableFallsBackToTheOlderCopy) {
  // Sync wrote sequence 2 (copy 0), CloseKeepingFiles sequence 3 (copy 1);
  // both describe the same data, so losing copy 1 loses nothing.
  SwapFileHeader h = ReadHeader(paths_[0]);
  CorruptByte(paths_[0], h.block_table_offset_bytes + h.block_table_copy_num_bytes + 40);
  StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(o_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  AlignedBuffer dst = MakeBuffer(4 * kBlock, 0);
  ASSERT_TRUE((*store)->Read(1, dst.data()).ok());
  EXPECT_EQ(std::memcmp(src_.data(), dst.data(), 4 * kBlock), 0);
}

TEST_F(KeptSetTest, BothBlockTablesCorruptIsDataLoss) {
  SwapFileHeader h = ReadHeader(paths_[0]);
  CorruptByte(paths_[0], h.block_table_offset_bytes + 40);
  CorruptByte(paths_[0], h.block_table_offset_bytes + h.block_table_copy_num_bytes + 40);
  Status s = StateStore::Open(o_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(paths_[0]), std::string::npos);
}

TEST_F(KeptSetTest, CorruptDataBlockIsDataLossNamingTensorPathAndOffset) {
  // Tensor 1 starts in directory 1; its first write took physical block 0 there.
  SwapFileHeader h = ReadHeader(paths_[1]);
  CorruptByte(paths_[1], h.data_offset_bytes + 1234);
  auto store = std::move(StateStore::Open(o_)).value();
  AlignedBuffer dst = MakeBuffer(4 * kBlock, 0);
  Status s = store->Read(1, dst.data());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("layers.0.mlp.up/exp_avg_sq"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(paths_[1]), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("offset " + std::to_string(h.data_offset_bytes)), std::string::npos)
      << s.message();
  EXPECT_EQ(store->stats().num_checksum_mismatches, 1u);
}

}  // namespace
}  // namespace tierflow::offload

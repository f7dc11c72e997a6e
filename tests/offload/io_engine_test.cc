// The io_uring engine over a real file with faults injected between it and
// the ring: every completion accounted for across rings, short transfers
// resubmitted, EAGAIN retried, errors mapped and named, fixed buffers used
// or refused with a reason.
#include "offload/io_engine.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "offload/fault_injecting_backend.h"
#include "offload/io_uring_backend.h"
#include "offload/swap_set.h"
#include "tests/offload/offload_test_util.h"

namespace tierflow::offload {
namespace {

using testing_util::FillPattern;
using testing_util::MakeBuffer;
using testing_util::ScratchDir;

constexpr uint32_t kChunk = 64 << 10;

class IoEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/engine.dat";
    StatusOr<int> fd = OpenSwapFile(path_, IoMode::kDirect, /*create=*/true);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    fd_ = *fd;
    plan_ = std::make_shared<FaultPlan>();
  }
  void TearDown() override { close(fd_); }

  std::unique_ptr<IoEngine> MakeEngine(uint32_t rings, uint32_t depth) {
    IoEngineOptions o;
    o.num_rings = rings;
    o.queue_depth = depth;
    o.backend_factory = FaultInjectingBackendFactory(plan_, IoUringBackendFactory());
    StatusOr<std::unique_ptr<IoEngine>> e = IoEngine::Create(o, {{fd_, path_}});
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }

  // Runs `n` requests of kChunk bytes at consecutive offsets; returns their statuses.
  std::vector<Status> RunAll(IoEngine& engine, IoOpKind kind, uint8_t* data, int n) {
    std::vector<IoRequest> requests(n);
    std::vector<Status> results(n);
    std::atomic<int> calls{0};
    for (int i = 0; i < n; ++i) {
      IoRequest& r = requests[i];
      r.kind = kind;
      r.file = 0;
      r.buffer = data + static_cast<size_t>(i) * kChunk;
      r.num_bytes = kChunk;
      r.offset_bytes = static_cast<uint64_t>(i) * kChunk;
      r.on_done = [&results, &calls, i](Status s) {
        results[i] = std::move(s);
        calls.fetch_add(1);
      };
    }
    for (IoRequest& r : requests) engine.Submit(&r);
    engine.Drain();
    EXPECT_EQ(calls.load(), n) << "every request completes exactly once";
    return results;
  }

  ScratchDir dir_;
  std::string path_;
  int fd_ = -1;
  std::shared_ptr<FaultPlan> plan_;
};

TEST_F(IoEngineTest, ManyRequestsOverTwoRingsRoundTrip) {
  auto engine = MakeEngine(/*rings=*/2, /*depth=*/4);
  const int n = 48;
  AlignedBuffer src = MakeBuffer(n * kChunk, 1);
  AlignedBuffer dst = MakeBuffer(n * kChunk, 2);
  for (const Status& s : RunAll(*engine, IoOpKind::kWrite, src.data(), n))
    ASSERT_TRUE(s.ok()) << s.ToString();
  for (const Status& s : RunAll(*engine, IoOpKind::kRead, dst.data(), n))
    ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n * kChunk), 0);
  IoEngineStats st = engine->stats();
  EXPECT_EQ(st.num_completed, 2u * n);
  EXPECT_EQ(st.bytes_written, uint64_t{n} * kChunk);
  EXPECT_EQ(st.bytes_read, uint64_t{n} * kChunk);
  EXPECT_TRUE(st.files_registered) << st.files_not_registered_reason;
}

TEST_F(IoEngineTest, ShortTransfersAreResubmittedForTheRest) {
  auto engine = MakeEngine(1, 8);
  const int n = 8;
  AlignedBuffer src = MakeBuffer(n * kChunk, 3);
  AlignedBuffer dst = MakeBuffer(n * kChunk, 4);
  plan_->Add({FaultKind::kShortTransfer, std::nullopt, 1, 1000, 0});
  for (const Status& s : RunAll(*engine, IoOpKind::kWrite, src.data(), n))
    ASSERT_TRUE(s.ok()) << s.ToString();
  for (const Status& s : RunAll(*engine, IoOpKind::kRead, dst.data(), n))
    ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n * kChunk), 0);
  // 64 KiB halves down to 4 KiB: several resubmissions per request.
  EXPECT_GE(engine->stats().num_short_resubmits, 2u * n);
}

TEST_F(IoEngineTest, EagainIsRetried) {
  auto engine = MakeEngine(1, 4);
  AlignedBuffer src = MakeBuffer(4 * kChunk, 5);
  plan_->Add({FaultKind::kErrno, IoOpKind::kWrite, 1, 3, EAGAIN});
  for (const Status& s : RunAll(*engine, IoOpKind::kWrite, src.data(), 4))
    ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(engine->stats().num_eagain_retries, 3u);
  EXPECT_EQ(plan_->num_injected(), 3u);
}

TEST_F(IoEngineTest, HardErrorsFailOnlyTheirRequestNamingPathAndOffset) {
  struct Case {
    int error;
    StatusCode code;
  };
  for (Case c : {Case{EIO, StatusCode::kIoError}, Case{ENOSPC, StatusCode::kResourceExhausted},
                 Case{EROFS, StatusCode::kFailedPrecondition}}) {
    plan_->Clear();
    plan_->Add({FaultKind::kErrno, IoOpKind::kWrite, 3, 1, c.error});
    auto engine = MakeEngine(1, 1);  // depth 1: ops are numbered in request order
    AlignedBuffer src = MakeBuffer(4 * kChunk, 6);
    std::vector<Status> results = RunAll(*engine, IoOpKind::kWrite, src.data(), 4);
    for (int i = 0; i < 4; ++i) {
      if (i != 2) {
        EXPECT_TRUE(results[i].ok()) << results[i].ToString();
        continue;
      }
      EXPECT_EQ(results[i].code(), c.code) << results[i].ToString();
      EXPECT_NE(results[i].message().find(path_), std::string::npos) << results[i].message();
      EXPECT_NE(results[i].message().find("offset " + std::to_string(2 * kChunk)),
                std::string::npos)
          << results[i].message();
    }
    EXPECT_EQ(engine->stats().num_failed, 1u);
  }
}

TEST_F(IoEngineTest, ReadPastEndOfFileIsDataLossNotAHang) {
  auto engine = MakeEngine(1, 4);
  AlignedBuffer dst = MakeBuffer(2 * kChunk, 7);
  std::vector<Status> results = RunAll(*engine, IoOpKind::kRead, dst.data(), 2);  // empty file
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("truncated"), std::string::npos);
  }
}

TEST_F(IoEngineTest, FixedBuffersAreUsedWhenRegistered) {
  auto engine = MakeEngine(2, 4);
  const int n = 4;  // 256 KiB: far under any memlock limit
  AlignedBuffer src = MakeBuffer(n * kChunk, 8);
  AlignedBuffer dst = MakeBuffer(n * kChunk, 9);
  Status reg =
      engine->RegisterBuffers({{src.data(), src.num_bytes()}, {dst.data(), dst.num_bytes()}});
  ASSERT_TRUE(reg.ok()) << reg.ToString();
  EXPECT_TRUE(engine->stats().fixed_buffers_registered);
  for (const Status& s : RunAll(*engine, IoOpKind::kWrite, src.data(), n))
    ASSERT_TRUE(s.ok()) << s.ToString();
  for (const Status& s : RunAll(*engine, IoOpKind::kRead, dst.data(), n))
    ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n * kChunk), 0);
  ASSERT_TRUE(engine->RegisterBuffers({}).ok());
  EXPECT_FALSE(engine->stats().fixed_buffers_registered);
}

TEST_F(IoEngineTest, FixedBuffersOverTheMemlockLimitAreRefusedWithAReason) {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > (256ull << 20)) {
    TIERFLOW_SKIP_WITHOUT("memlock") << "RLIMIT_MEMLOCK is unlimited or large here";
  }
  auto engine = MakeEngine(1, 4);
  AlignedBuffer big = MakeBuffer(2 * lim.rlim_cur + (1 << 20), 10);
  Status reg = engine->RegisterBuffers({{big.data(), big.num_bytes()}});
  if (reg.ok())
    TIERFLOW_SKIP_WITHOUT("memlock") << "the kernel pinned past RLIMIT_MEMLOCK (CAP_IPC_LOCK?)";
  EXPECT_EQ(reg.code(), StatusCode::kResourceExhausted) << reg.ToString();
  IoEngineStats st = engine->stats();
  EXPECT_FALSE(st.fixed_buffers_registered);
  EXPECT_NE(st.fixed_buffers_reason.find("RLIMIT_MEMLOCK"), std::string::npos)
      << st.fixed_buffers_reason;
  // Still works, unregistered.
  for (const Status& s : RunAll(*engine, IoOpKind::kWrite, big.data(), 4))
    ASSERT_TRUE(s.ok()) << s.ToString();
}

// A hard io_uring_submit failure after the batch was queued: the engine used
// to fail every op of the batch while the untaken SQEs stayed in the ring, so
// the next submit wrote the "failed" requests' buffers to disk after their
// owners were told they failed (and completed them a second time).
TEST_F(IoEngineTest, SubmitFailureLeavesNoFailedOpInRing) {
  auto engine = MakeEngine(1, 8);
  constexpr int kBatch = 4;
  AlignedBuffer src = MakeBuffer((kBatch + 1) * kChunk, 12);
  plan_->Add({FaultKind::kSubmitFailsAfterQueuing, IoOpKind::kWrite, 2, 1, ENOMEM});
  std::vector<IoRequest> requests(kBatch);
  std::vector<Status> results(kBatch);
  std::vector<std::atomic<int>> calls(kBatch);
  std::vector<IoRequest*> batch;
  for (int i = 0; i < kBatch; ++i) {
    IoRequest& r = requests[i];
    r.kind = IoOpKind::kWrite;
    r.buffer = src.data() + static_cast<size_t>(i) * kChunk;
    r.num_bytes = kChunk;
    r.offset_bytes = static_cast<uint64_t>(i) * kChunk;
    r.on_done = [&results, &calls, i](Status s) {
      results[i] = std::move(s);
      calls[i].fetch_add(1);
    };
    batch.push_back(&r);
  }
  engine->Submit(batch);  // one lock: the ring takes all four in one submit
  engine->Drain();
  EXPECT_TRUE(results[0].ok()) << results[0].ToString();
  for (int i = 1; i < kBatch; ++i) {
    EXPECT_EQ(results[i].code(), StatusCode::kOutOfMemory) << results[i].ToString();
    EXPECT_NE(results[i].message().find("io_uring_submit"), std::string::npos)
        << results[i].message();
    EXPECT_NE(results[i].message().find(path_), std::string::npos) << results[i].message();
  }
  // The ring keeps working afterwards; this submit would have issued the
  // stale SQEs too.
  IoRequest after;
  Status after_status = InternalError("not completed");
  after.kind = IoOpKind::kWrite;
  after.buffer = src.data() + kBatch * kChunk;
  after.num_bytes = kChunk;
  after.offset_bytes = kBatch * kChunk;
  after.on_done = [&after_status](Status s) { after_status = std::move(s); };
  engine->Submit(&after);
  engine->Drain();
  EXPECT_TRUE(after_status.ok()) << after_status.ToString();
  engine.reset();  // every ring thread stopped: nothing can still land
  for (int i = 0; i < kBatch; ++i) EXPECT_EQ(calls[i].load(), 1) << "request " << i;

  // On disk: requests 0 and 4 written, the failed ones' ranges never touched.
  int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> disk((kBatch + 1) * kChunk, 0);
  ssize_t n = pread(fd, disk.data(), disk.size(), 0);
  close(fd);
  ASSERT_EQ(n, static_cast<ssize_t>(disk.size()));
  EXPECT_EQ(std::memcmp(disk.data(), src.data(), kChunk), 0);
  EXPECT_EQ(std::memcmp(disk.data() + kBatch * kChunk, src.data() + kBatch * kChunk, kChunk), 0);
  std::vector<uint8_t> zeros(kChunk, 0);
  for (int i = 1; i < kBatch; ++i) {
    EXPECT_EQ(std::memcmp(disk.data() + i * kChunk, zeros.data(), kChunk), 0)
        << "request " << i << " was told it failed, yet its bytes reached the file";
  }
}

TEST(IoEngineOptionsTest, BadOptionsAreInvalidArgument) {
  IoEngineOptions o;
  o.queue_depth = 0;
  EXPECT_EQ(IoEngine::Create(o, {}).status().code(), StatusCode::kInvalidArgument);
  o.queue_depth = 8;
  o.num_rings = 0;
  EXPECT_EQ(IoEngine::Create(o, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow::offload

namespace tierflow::offload {
namespace {

TEST_F(IoEngineTest, RefusedFixedBuffersAreReportedAndIoContinuesUnregistered) {
  // What RLIMIT_MEMLOCK does for a user without CAP_IPC_LOCK, on any machine.
  plan_->SetRegisterBuffersError(ENOMEM);
  auto engine = MakeEngine(2, 4);
  AlignedBuffer src = MakeBuffer(4 * kChunk, 11);
  Status reg = engine->RegisterBuffers({{src.data(), src.num_bytes()}});
  EXPECT_EQ(reg.code(), StatusCode::kResourceExhausted) << reg.ToString();
  IoEngineStats st = engine->stats();
  EXPECT_FALSE(st.fixed_buffers_registered);
  EXPECT_NE(st.fixed_buffers_reason.find("RLIMIT_MEMLOCK"), std::string::npos)
      << st.fixed_buffers_reason;
  for (const Status& s : RunAll(*engine, IoOpKind::kWrite, src.data(), 4))
    ASSERT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace tierflow::offload

// The store under injected faults: a failed or torn write keeps the last good
// copy (and the store keeps working), I/O errors and checksum mismatches name
// tensor, path and offset, short transfers and EAGAIN are absorbed.
#include <cstring>

#include <gtest/gtest.h>

#include "offload/fault_injecting_backend.h"
#include "offload/io_uring_backend.h"
#include "offload/state_store.h"
#include "tests/offload/offload_test_util.h"

namespace tierflow::offload {
namespace {

using testing_util::MakeBuffer;
using testing_util::ScratchDir;

constexpr uint32_t kBlock = 128 << 10;
constexpr uint64_t kTensorBytes = 6 * kBlock;
const char* kName = "layers.7.attn.qkv/exp_avg";

class StoreFaultTest : public ::testing::TestWithParam<int /*dirs*/> {
 protected:
  void SetUp() override {
    plan_ = std::make_shared<FaultPlan>();
    StateStoreOptions o;
    o.directories = {a_.path()};
    if (GetParam() == 2) o.directories.push_back(b_.path());
    o.block_size_bytes = kBlock;
    o.queue_depth = 4;
    o.spare_bytes_per_directory = 16 * kBlock;
    o.backend_factory = FaultInjectingBackendFactory(plan_, IoUringBackendFactory());
    StatusOr<std::unique_ptr<StateStore>> s =
        StateStore::Create(o, {{"other", DType::kF32, kBlock}, {kName, DType::kF32, kTensorBytes}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    good_ = MakeBuffer(kTensorBytes, 1);
    next_ = MakeBuffer(kTensorBytes, 2);
    out_ = MakeBuffer(kTensorBytes, 3);
    ASSERT_TRUE(store_->Write(1, good_.data()).ok());
    plan_->Clear();  // tests count operations from here
  }

  // The tensor reads back exactly as `expected`, with no fault active.
  void ExpectContents(const AlignedBuffer& expected) {
    plan_->Clear();
    Status s = store_->Read(1, out_.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::memcmp(out_.data(), expected.data(), kTensorBytes), 0);
  }

  void ExpectNamesTensorPathAndOffset(const Status& s) {
    EXPECT_NE(s.message().find(kName), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(".swap"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("offset "), std::string::npos) << s.message();
  }

  ScratchDir a_, b_;
  std::shared_ptr<FaultPlan> plan_;
  std::unique_ptr<StateStore> store_;
  AlignedBuffer good_, next_, out_;
};

TEST_P(StoreFaultTest, FailedWriteKeepsTheLastGoodCopy) {
  struct Case {
    int error;
    StatusCode code;
  };
  for (Case c : {Case{EIO, StatusCode::kIoError}, Case{ENOSPC, StatusCode::kResourceExhausted},
                 Case{EROFS, StatusCode::kFailedPrecondition}}) {
    plan_->Clear();
    // The 4th of 6 block writes fails while the others land: a torn write.
    plan_->Add({FaultKind::kErrno, IoOpKind::kWrite, 4, 1, c.error});
    Status s = store_->Write(1, next_.data());
    ASSERT_EQ(s.code(), c.code) << s.ToString();
    ExpectNamesTensorPathAndOffset(s);
    ExpectContents(good_);
  }
  EXPECT_EQ(store_->stats().num_failed_writes_rolled_back, 3u);
  // The store still works, and the spare blocks the failed writes took are back.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(store_->Write(1, (i % 2 ? good_ : next_).data()).ok());
  ExpectContents(good_);
}

TEST_P(StoreFaultTest, FailedPartialWriteKeepsTheWholeRange) {
  plan_->Add({FaultKind::kErrno, IoOpKind::kWrite, 2, 1, EIO});
  Status s = store_->WriteAsync(1, next_.data() + kBlock, kBlock, 3 * kBlock)->Wait();
  ASSERT_EQ(s.code(), StatusCode::kIoError);
  ExpectContents(good_);
}

TEST_P(StoreFaultTest, ReadErrorNamesTensorPathAndOffset) {
  plan_->Add({FaultKind::kErrno, IoOpKind::kRead, 3, 1, EIO});
  Status s = store_->Read(1, out_.data());
  ASSERT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  ExpectNamesTensorPathAndOffset(s);
  EXPECT_NE(s.message().find("block 2"), std::string::npos) << s.message();
  ExpectContents(good_);  // nothing on disk was harmed
}

TEST_P(StoreFaultTest, FlippedBitOnReadIsDataLoss) {
  plan_->Add({FaultKind::kFlipBit, IoOpKind::kRead, 2, 1, 0});
  Status s = store_->Read(1, out_.data());
  ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  ExpectNamesTensorPathAndOffset(s);
  EXPECT_NE(s.message().find("checksum"), std::string::npos);
  EXPECT_EQ(store_->stats().num_checksum_mismatches, 1u);
  ExpectContents(good_);
}

// Each block is verified as soon as it lands (while later ones are still in
// flight): a flip is caught in whichever block it hits, and named.
TEST_P(StoreFaultTest, AFlipIsCaughtInEveryBlockOfARead) {
  for (int k = 1; k <= 6; ++k) {
    plan_->Clear();
    plan_->Add({FaultKind::kFlipBit, IoOpKind::kRead, static_cast<uint64_t>(k), 1, 0});
    Status s = store_->Read(1, out_.data());
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << "block " << k - 1 << ": " << s.ToString();
    EXPECT_NE(s.message().find("block " + std::to_string(k - 1) + " "), std::string::npos)
        << s.message();
  }
  EXPECT_EQ(store_->stats().num_checksum_mismatches, 6u);
  ExpectContents(good_);
}

// A read with a flipped block and a failed one reports the I/O error (the
// checksum of what did not arrive means nothing), after every block is done.
TEST_P(StoreFaultTest, AnIoErrorWinsOverAMismatchInTheSameRead) {
  plan_->Add({FaultKind::kFlipBit, IoOpKind::kRead, 1, 1, 0});
  plan_->Add({FaultKind::kErrno, IoOpKind::kRead, 5, 1, EIO});
  Status s = store_->Read(1, out_.data());
  ASSERT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("block 4"), std::string::npos) << s.message();
  ExpectContents(good_);
}

TEST_P(StoreFaultTest, FlippedBitOnWriteIsCaughtOnTheNextRead) {
  plan_->Add({FaultKind::kFlipBit, IoOpKind::kWrite, 5, 1, 0});  // one of the 6 blocks
  ASSERT_TRUE(store_->Write(1, next_.data()).ok());              // the drive said yes
  plan_->Clear();
  Status s = store_->Read(1, out_.data());
  ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  ExpectNamesTensorPathAndOffset(s);
  // Which block carried the flip depends on how blocks were spread over
  // the checksum tasks; the message names it either way.
  EXPECT_NE(s.message().find("block "), std::string::npos) << s.message();
}

TEST_P(StoreFaultTest, ShortTransfersAndEagainAreAbsorbed) {
  plan_->Add({FaultKind::kShortTransfer, std::nullopt, 1, 6, 0});
  plan_->Add({FaultKind::kErrno, std::nullopt, 7, 3, EAGAIN});
  ASSERT_TRUE(store_->Write(1, next_.data()).ok());
  ASSERT_TRUE(store_->Read(1, out_.data()).ok());
  EXPECT_EQ(std::memcmp(out_.data(), next_.data(), kTensorBytes), 0);
  StateStoreStats st = store_->stats();
  // How many of the 6 cut operations were resubmissions of earlier cut ones
  // (a 4 KiB rest cannot be cut) depends on timing; at least one was cut.
  EXPECT_GE(st.engine.num_short_resubmits, 1u);
  EXPECT_EQ(st.engine.num_eagain_retries, 3u);
}

TEST_P(StoreFaultTest, PersistentEagainGivesUpWithAnError) {
  plan_->Add({FaultKind::kErrno, IoOpKind::kRead, 1, ~0ull, EAGAIN});
  Status s = store_->Read(1, out_.data());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("gave up"), std::string::npos) << s.message();
  ExpectNamesTensorPathAndOffset(s);
}

INSTANTIATE_TEST_SUITE_P(Dirs, StoreFaultTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "Dirs";
                         });

}  // namespace
}  // namespace tierflow::offload

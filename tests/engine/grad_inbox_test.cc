// The gradient inbox and the piece ledger on their own: the contract checks
// on the model's pieces, bucket accounting, and which landing buffers each
// kind of step gets.
#include "engine/grad_inbox.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/piece_ledger.h"
#include "tests/engine/engine_test_util.h"

namespace tierflow {
namespace {

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class PieceLedgerTest : public ::testing::Test {
 protected:
  std::vector<UnitInfo> units_{{"emb", 100}, {"head", 250}};
  PieceLedger ledger_{units_, /*bucket_params=*/128, /*buckets=*/2};
};

TEST_F(PieceLedgerTest, PiecesThatCoverEachUnitPass) {
  ledger_.BeginMicroBatch();
  ASSERT_TRUE(ledger_.CheckBegin(0, 0, 100).ok());
  ledger_.Open(0, 0, 0, 100);
  for (uint64_t begin : {128, 0}) {  // any order, one open at a time
    const uint64_t count = begin == 0 ? 128 : 122;
    ASSERT_TRUE(ledger_.CheckBegin(1, begin, count).ok()) << begin;
    ledger_.Open(1, 1, begin, count);
    auto closed = ledger_.Close(1);
    ASSERT_TRUE(closed.ok());
    EXPECT_EQ(closed->bucket, 1);
    EXPECT_EQ(closed->begin, begin);
    EXPECT_EQ(closed->count, count);
  }
  ASSERT_TRUE(ledger_.Close(0).ok());
  EXPECT_TRUE(ledger_.CheckComplete().ok());
  // The next micro-batch starts with nothing covered.
  ledger_.BeginMicroBatch();
  EXPECT_TRUE(Mentions(ledger_.CheckComplete(), "gradients for 0 of the 100 parameters of 'emb'"));
}

TEST_F(PieceLedgerTest, RefusesRangesOutsideTheUnitOrAboveABucket) {
  EXPECT_TRUE(Mentions(ledger_.CheckBegin(2, 0, 1), "no unit 2"));
  EXPECT_TRUE(Mentions(ledger_.CheckBegin(0, 90, 20), "[90, +20) are not a non-empty range"));
  EXPECT_TRUE(Mentions(ledger_.CheckBegin(0, 0, 0), "not a non-empty range"));
  EXPECT_TRUE(Mentions(ledger_.CheckBegin(1, 0, 129), "exceeds the gradient buckets' 128"));
}

TEST_F(PieceLedgerTest, RefusesOverlapsAndASecondOpenPiece) {
  ledger_.BeginMicroBatch();
  ledger_.Open(1, 0, 0, 128);
  EXPECT_TRUE(Mentions(ledger_.CheckBegin(1, 128, 10), "while its previous piece is open"));
  ASSERT_TRUE(ledger_.Close(1).ok());
  EXPECT_TRUE(Mentions(ledger_.CheckBegin(1, 100, 50), "overlap an earlier piece [0, +128)"));
  EXPECT_TRUE(Mentions(ledger_.Close(1).status(), "EndGrads without BeginGrads for unit 1"));
}

TEST_F(PieceLedgerTest, EveryBucketHeldByOpenPiecesIsRefusedNotAwaited) {
  std::vector<UnitInfo> three = {{"a", 10}, {"b", 10}, {"c", 10}};
  PieceLedger small(three, 10, 2);
  small.Open(0, 0, 0, 10);
  small.Open(1, 1, 0, 10);
  const Status s = small.CheckBegin(2, 0, 10);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(s, "all 2 gradient buckets are held by open pieces")) << s.ToString();
  EXPECT_TRUE(Mentions(small.CheckComplete(), "left a gradient piece of 'a' open"));
}

class GradInboxTest : public ::testing::Test {
 protected:
  void SetUp() override { device_ = testing_util::CpuDevice(16ull << 20); }
  std::unique_ptr<GradInbox> Make(GradLanding landing, DType transfer = DType::kBF16) {
    GradInbox::Config c;
    c.bucket_params = 64;
    c.buckets = 3;
    c.transfer_dtype = transfer;
    c.landing = landing;
    auto made = GradInbox::Create(*device_, /*model_params=*/1000, c);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? std::move(made).value() : nullptr;
  }
  std::unique_ptr<Device> device_;
};

TEST_F(GradInboxTest, BucketsAreTakenUntilFreed) {
  auto inbox = Make(GradLanding::kLanded);
  EXPECT_EQ(inbox->TakeFree(), 0);
  EXPECT_EQ(inbox->TakeFree(), 1);
  EXPECT_EQ(inbox->TakeFree(), 2);
  EXPECT_EQ(inbox->TakeFree(), -1);
  EXPECT_EQ(inbox->busy_buckets(), 3);
  inbox->Free(1);
  EXPECT_EQ(inbox->busy_buckets(), 2);
  EXPECT_EQ(inbox->TakeFree(), 1);
}

TEST_F(GradInboxTest, SixteenBitTransfersSendTheirCast) {
  auto bf16 = Make(GradLanding::kLanded, DType::kBF16);
  EXPECT_NE(bf16->bucket(0).wire.data(), nullptr);
  EXPECT_EQ(bf16->bucket(0).sent(), bf16->bucket(0).wire.data());
  EXPECT_EQ(bf16->tbytes(), 2u);
  auto f32 = Make(GradLanding::kLanded, DType::kF32);
  EXPECT_EQ(f32->bucket(0).wire.data(), nullptr);
  EXPECT_EQ(f32->bucket(0).sent(), f32->bucket(0).grads.data());
}

TEST_F(GradInboxTest, EachLandingGetsItsBuffersOnly) {
  const uint64_t before = device_->PinnedMemory().in_use_bytes;
  auto landed = Make(GradLanding::kLanded);
  // One micro-batch: no staging; the whole model lands pinned in bf16.
  EXPECT_EQ(landed->bucket(0).staging.data(), nullptr);
  EXPECT_EQ(device_->PinnedMemory().in_use_bytes - before, 1000 * 2 + 3 * sizeof(GradSquares));
  EXPECT_EQ(landed->Landed(10) - landed->Landed(0), 20);
  landed.reset();

  auto accumulated = Make(GradLanding::kAccumulated);
  EXPECT_NE(accumulated->bucket(2).staging.data(), nullptr);
  EXPECT_NE(accumulated->Accumulator(), nullptr);  // pageable, not pinned
  EXPECT_EQ(device_->PinnedMemory().in_use_bytes - before, 3 * (64 * 2 + sizeof(GradSquares)));
  accumulated.reset();

  auto either = Make(GradLanding::kEither);
  EXPECT_NE(either->bucket(0).staging.data(), nullptr);
  // The pinned fp32 buffer serves as landing and accumulator alike.
  EXPECT_EQ(static_cast<void*>(either->Accumulator()), static_cast<void*>(either->Landed(0)));
  either.reset();

  auto gathered = Make(GradLanding::kGathered);
  EXPECT_NE(gathered->Gathered(0), nullptr);
  EXPECT_EQ(gathered->Gathered(5) - gathered->Gathered(0), 10);
  gathered.reset();

  auto none = Make(GradLanding::kNone);
  EXPECT_EQ(none->bucket(0).staging.data(), nullptr);
  EXPECT_EQ(device_->PinnedMemory().in_use_bytes - before, 3 * sizeof(GradSquares));
}

TEST_F(GradInboxTest, RefusesEmptyBuckets) {
  GradInbox::Config c;
  c.bucket_params = 0;
  auto made = GradInbox::Create(*device_, 10, c);
  ASSERT_FALSE(made.ok());
  EXPECT_TRUE(Mentions(made.status(), "3 buckets of 0 parameters")) << made.status().ToString();
}

}  // namespace
}  // namespace tierflow

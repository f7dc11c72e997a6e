// The committer on its own: the clip decision, the speculation budget and
// queue, and commit or rollback of speculated sub-groups on a tier that keeps
// backups (host) and on one that speculates out of place (a recording fake).
#include "engine/committer.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/host_state_tier.h"
#include "tests/engine/engine_test_util.h"

namespace tierflow {
namespace {

TEST(DecideClip, NoClippingKeepsSpeculation) {
  const ClipDecision d = DecideClip({9.0, 16.0}, {0, 0}, 1.0f, 10.0);
  EXPECT_FALSE(d.non_finite);
  EXPECT_DOUBLE_EQ(d.grad_norm, 5.0);
  EXPECT_EQ(d.coef, 1.0f);
  EXPECT_TRUE(d.speculation_valid());
}

TEST(DecideClip, ClippingInvalidatesSpeculation) {
  const ClipDecision d = DecideClip({9.0, 16.0}, {0, 0}, 1.0f, 1.0);
  EXPECT_EQ(d.coef, static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_FALSE(d.speculation_valid());
}

TEST(DecideClip, TheNormIsOfTheUnscaledGradient) {
  // sqrt(100) / 4 = 2.5 is under 3: no clipping although the scaled norm is 10.
  const ClipDecision d = DecideClip({100.0}, {0}, 4.0f, 3.0);
  EXPECT_DOUBLE_EQ(d.grad_norm, 2.5);
  EXPECT_EQ(d.coef, 1.0f);
}

TEST(DecideClip, ANonFiniteUnitSkipsTheStep) {
  const ClipDecision d = DecideClip({1.0, 1.0}, {0, 1}, 1.0f, 0.5);
  EXPECT_TRUE(d.non_finite);
  EXPECT_TRUE(std::isnan(d.grad_norm));
  EXPECT_EQ(d.coef, 1.0f);  // never clipped: nothing is applied
  EXPECT_FALSE(d.speculation_valid());
}

// A tier that speculates out of place and records what the committer asks.
class RecordingTier : public StateTier {
 public:
  std::string_view name() const override { return "recording"; }
  Status Write(int, const float*, const float*, const float*) override { return Status::Ok(); }
  Status Read(int, float*, float*, float*) override { return Status::Ok(); }
  Status Prefetch(int) override { return Status::Ok(); }
  Status PrefetchWaitingForWrites(int) override { return Status::Ok(); }
  StatusOr<StateView> Acquire(int) override { return InternalError("not acquired in tests"); }
  Status Release(int, bool) override { return Status::Ok(); }
  bool SpeculatesOutOfPlace() const override { return true; }
  Status ReleaseSpeculative(int g) override {
    log.push_back("speculative " + std::to_string(g));
    return Status::Ok();
  }
  Status Commit(int g) override {
    log.push_back("commit " + std::to_string(g));
    return Status::Ok();
  }
  Status Abort(int g) override {
    log.push_back("abort " + std::to_string(g));
    return Status::Ok();
  }
  Status Flush() override { return Status::Ok(); }
  TierStats Stats() const override { return {}; }
  std::vector<std::string> log;
};

class CommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = testing_util::CpuDevice(16ull << 20);
    // Two units of 300 parameters in sub-groups of 100: groups 0-2 and 3-5.
    layout_ =
        MakeSubGroups({{"a", 300}, {"b", 300}}, SubGroupRule{SubGroupCut::kSlices, 100}).value();
    host_ = HostStateTier::Create(layout_).value();
  }

  std::unique_ptr<Committer> Make(StateTier* tier, uint64_t budget, bool pause = true) {
    Committer::Config c;
    c.budget_params = budget;
    c.weights_dtype = DType::kF32;
    c.pause_after_clip = pause;
    auto made = Committer::Create(*device_, layout_,
                                  std::vector<StateTier*>(layout_.groups.size(), tier), c, nullptr);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? std::move(made).value() : nullptr;
  }

  // What a speculative update does on the host tier: the old state into the
  // backup, a new state in place, new weights out.
  void FakeUpdate(Committer& c, int g, float new_value) {
    auto t = c.BeginSpeculation(g);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    StateView v = host_->Acquire(g).value();
    const uint64_t n = layout_.groups[g].num_params;
    if (t->backup.master != nullptr) {
      std::copy(v.master, v.master + n, t->backup.master);
      std::copy(v.exp_avg, v.exp_avg + n, t->backup.exp_avg);
      std::copy(v.exp_avg_sq, v.exp_avg_sq + n, t->backup.exp_avg_sq);
    }
    std::fill(v.master, v.master + n, new_value);
    std::fill(v.exp_avg, v.exp_avg + n, new_value);
    std::fill(v.exp_avg_sq, v.exp_avg_sq + n, new_value);
    std::fill(static_cast<float*>(t->out), static_cast<float*>(t->out) + n, new_value);
    ASSERT_TRUE(c.EndSpeculation(g).ok());
  }

  void SetState(int g, float value) {
    std::vector<float> x(layout_.groups[g].num_params, value);
    ASSERT_TRUE(host_->Write(g, x.data(), x.data(), x.data()).ok());
  }

  float Master(int g) {
    std::vector<float> m(layout_.groups[g].num_params);
    EXPECT_TRUE(host_->Read(g, m.data(), nullptr, nullptr).ok());
    return m.back();
  }

  std::unique_ptr<Device> device_;
  SubGroupLayout layout_;
  std::unique_ptr<HostStateTier> host_;
};

TEST_F(CommitterTest, QueuesWithinTheBudgetOnly) {
  auto c = Make(host_.get(), 450);
  c->BeginStep();
  c->QueueUnit(7, 1);  // 300 of 450
  c->QueueUnit(7, 0);  // one more group fits (400), not a second (500)
  EXPECT_EQ(c->pending_step(), 7);
  std::vector<int> order;
  while (c->HasPending()) order.push_back(c->PopPending());
  EXPECT_EQ(order, (std::vector<int>{3, 4, 5, 0}));
  // A new step starts with the whole budget again.
  c->BeginStep();
  c->QueueUnit(8, 0);
  c->ClearPending();
  EXPECT_FALSE(c->HasPending());
}

TEST_F(CommitterTest, ABudgetOfNothingQueuesNothing) {
  auto c = Make(host_.get(), 0);
  c->BeginStep();
  c->QueueUnit(1, 0);
  EXPECT_FALSE(c->HasPending());
}

TEST_F(CommitterTest, CommitKeepsTheUpdateAndHandsOutItsWeights) {
  auto c = Make(host_.get(), 600);
  for (int g = 0; g < 6; ++g) SetState(g, 1.0f);
  c->BeginStep();
  FakeUpdate(*c, 4, 2.0f);
  FakeUpdate(*c, 5, 3.0f);
  std::vector<const void*> committed;
  std::vector<char> done(6, 0);
  auto o = c->Resolve(DecideClip({1.0, 1.0}, {0, 0}, 1.0f, 10.0), &committed, &done);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->speculated, 2);
  EXPECT_TRUE(o->committed);
  EXPECT_FALSE(o->rolled_back);
  EXPECT_FALSE(c->paused());
  EXPECT_EQ(done, (std::vector<char>{0, 0, 0, 0, 1, 1}));
  ASSERT_EQ(committed.size(), 6u);
  EXPECT_EQ(committed[0], nullptr);
  ASSERT_NE(committed[4], nullptr);
  ASSERT_NE(committed[5], nullptr);
  EXPECT_EQ(static_cast<const float*>(committed[4])[99], 2.0f);
  EXPECT_EQ(static_cast<const float*>(committed[5])[0], 3.0f);
  EXPECT_EQ(Master(4), 2.0f);
  EXPECT_EQ(Master(5), 3.0f);
}

TEST_F(CommitterTest, RollbackRestoresTheBackupAndPausesTheNextStep) {
  auto c = Make(host_.get(), 600);
  for (int g = 0; g < 6; ++g) SetState(g, static_cast<float>(g));
  c->BeginStep();
  FakeUpdate(*c, 5, 50.0f);
  FakeUpdate(*c, 4, 40.0f);
  std::vector<const void*> committed;
  std::vector<char> done(6, 0);
  auto o = c->Resolve(DecideClip({100.0}, {0}, 1.0f, 1.0), &committed, &done);  // clipped
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->rolled_back);
  EXPECT_FALSE(o->committed);
  EXPECT_FALSE(o->paused);
  EXPECT_EQ(done, std::vector<char>(6, 0));  // redone with the rest
  for (const void* p : committed) EXPECT_EQ(p, nullptr);
  EXPECT_EQ(Master(4), 4.0f);
  EXPECT_EQ(Master(5), 5.0f);
  EXPECT_TRUE(c->paused());
  // The paused step speculates nothing; its (unclipped) decision resumes.
  c->BeginStep();
  o = c->Resolve(DecideClip({1.0}, {0}, 1.0f, 10.0), &committed, &done);
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->paused);
  EXPECT_FALSE(o->rolled_back);
  EXPECT_FALSE(c->paused());
}

TEST_F(CommitterTest, WithoutPauseAfterClipSpeculationGoesOn) {
  auto c = Make(host_.get(), 600, /*pause=*/false);
  c->BeginStep();
  std::vector<const void*> committed;
  std::vector<char> done(6, 0);
  ASSERT_TRUE(c->Resolve(DecideClip({100.0}, {0}, 1.0f, 1.0), &committed, &done).ok());
  EXPECT_FALSE(c->paused());
}

TEST_F(CommitterTest, AnOutOfPlaceTierCommitsOrAbortsWithoutBackups) {
  RecordingTier tier;
  auto c = Make(&tier, 600);
  for (bool valid : {true, false}) {
    c->BeginStep();
    for (int g : {5, 3}) {
      auto t = c->BeginSpeculation(g);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_EQ(t->backup.master, nullptr);
      ASSERT_TRUE(c->EndSpeculation(g).ok());
    }
    std::vector<const void*> committed;
    std::vector<char> done(6, 0);
    auto o = c->Resolve(DecideClip({1.0}, {static_cast<char>(valid ? 0 : 1)}, 1.0f, 0), &committed,
                        &done);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->committed, valid);
  }
  EXPECT_EQ(tier.log,
            (std::vector<std::string>{"speculative 5", "speculative 3", "commit 5", "commit 3",
                                      "speculative 5", "speculative 3", "abort 5", "abort 3"}));
}

TEST_F(CommitterTest, RefusesTiersThatDoNotMatchTheSubGroups) {
  Committer::Config c;
  auto made = Committer::Create(*device_, layout_, {host_.get()}, c, nullptr);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("1 sub-group tiers for 6 sub-groups"), std::string::npos)
      << made.status().ToString();
}

}  // namespace
}  // namespace tierflow

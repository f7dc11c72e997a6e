// common/cancel.h: what a SIGINT/SIGTERM asks of long loops. Issue 18: the
// signal handler set a flag the planner never read, so `plan` ran on.
#include "common/cancel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

namespace tierflow {
namespace {

using ::testing::HasSubstr;

class Cancel : public ::testing::Test {
 protected:
  void SetUp() override { ResetCancelForTesting(); }
  void TearDown() override { ResetCancelForTesting(); }
};

TEST_F(Cancel, NothingPendingIsOk) {
  EXPECT_FALSE(CancelRequested());
  EXPECT_EQ(CancelRequestCount(), 0);
  EXPECT_TRUE(CheckCancel("doing nothing").ok());
}

TEST_F(Cancel, ARequestAbortsNamingTheSignalAndTheWork) {
  RequestCancel(SIGTERM);
  EXPECT_TRUE(CancelRequested());
  EXPECT_EQ(CancelRequestCount(), 1);
  EXPECT_EQ(CancelSignal(), SIGTERM);
  Status s = CheckCancel("planning llama-7b");
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("interrupted by SIGTERM while planning llama-7b"));
  // It stays pending: every later check fails too, so nested loops all unwind.
  EXPECT_FALSE(CheckCancel("the next step").ok());
}

TEST_F(Cancel, SigintAndNonSignalRequestsAreNamed) {
  RequestCancel(SIGINT);
  EXPECT_THAT(CheckCancel("x").message(), HasSubstr("SIGINT"));
  ResetCancelForTesting();
  RequestCancel(0);
  EXPECT_THAT(CheckCancel("x").message(), HasSubstr("a stop request"));
}

TEST_F(Cancel, AShieldHoldsOffTheFirstRequestOnly) {
  {
    CancelShield shield;
    RequestCancel(SIGINT);
    EXPECT_TRUE(CancelRequested());
    EXPECT_TRUE(CheckCancel("saving the final checkpoint").ok());
    RequestCancel(SIGINT);  // the second signal interrupts even shielded work
    EXPECT_EQ(CancelRequestCount(), 2);
    EXPECT_EQ(CheckCancel("saving the final checkpoint").code(), StatusCode::kAborted);
  }
  ResetCancelForTesting();
  {
    CancelShield shield;
    RequestCancel(SIGTERM);
    EXPECT_TRUE(CheckCancel("x").ok());
  }
  // Outside the shield the same single request stops work.
  EXPECT_EQ(CheckCancel("x").code(), StatusCode::kAborted);
}

TEST_F(Cancel, ShieldsNestAndAreProcessWide) {
  RequestCancel(SIGTERM);
  {
    CancelShield outer;
    { CancelShield inner; }
    EXPECT_TRUE(CheckCancel("x").ok());  // the outer one still shields
    bool ok_on_other_thread = false;
    std::thread([&] { ok_on_other_thread = CheckCancel("io").ok(); }).join();
    EXPECT_TRUE(ok_on_other_thread);
  }
  EXPECT_FALSE(CheckCancel("x").ok());
}

TEST_F(Cancel, ResetForgetsEveryRequest) {
  RequestCancel(SIGTERM);
  RequestCancel(SIGTERM);
  ResetCancelForTesting();
  EXPECT_FALSE(CancelRequested());
  EXPECT_EQ(CancelRequestCount(), 0);
  EXPECT_EQ(CancelSignal(), 0);
  EXPECT_TRUE(CheckCancel("x").ok());
}

TEST_F(Cancel, InstalledHandlersTurnARealSignalIntoARequest) {
  struct sigaction old_int, old_term;
  sigaction(SIGINT, nullptr, &old_int);
  sigaction(SIGTERM, nullptr, &old_term);
  InstallCancelSignalHandlers();
  ASSERT_EQ(raise(SIGTERM), 0);  // synchronous: the handler has run on return
  EXPECT_EQ(CancelRequestCount(), 1);
  EXPECT_EQ(CancelSignal(), SIGTERM);
  EXPECT_EQ(CheckCancel("planning").code(), StatusCode::kAborted);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
}

}  // namespace
}  // namespace tierflow

// The polling wait of every collective (comm/peer_watch.h): it returns when
// the wait is over, passes on the poll's error, and when the liveness check
// names a dead peer hands the message to end_job (MPI_Abort in a run) and,
// should that return, fails with it. Without a check it only polls.
#include "comm/peer_watch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tierflow::comm {
namespace {

TEST(PeerWatch, ReturnsWhenTheWaitIsOverWithoutAskingTooOften) {
  int polls = 0, checks = 0;
  PeerWatch watch;
  watch.check = [&]() -> std::optional<std::string> {
    ++checks;
    return std::nullopt;
  };
  watch.every = std::chrono::hours(1);
  const Status s = PollWithPeerWatch([&]() -> StatusOr<bool> { return ++polls == 5; }, watch);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(polls, 5);
  EXPECT_EQ(checks, 0);  // an hour had not passed
}

TEST(PeerWatch, PassesOnThePollsError) {
  const Status s = PollWithPeerWatch(
      []() -> StatusOr<bool> { return InternalError("stream failed"); }, PeerWatch{});
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("stream failed"), std::string::npos);
}

TEST(PeerWatch, ADeadPeerEndsTheJobNamingIt) {
  int checks = 0;
  std::vector<std::string> ended;
  PeerWatch watch;
  watch.every = std::chrono::milliseconds(1);
  watch.check = [&]() -> std::optional<std::string> {
    if (++checks < 3) return std::nullopt;
    return std::string("rank 2 (pid 77 on node-b) has not beaten for 30 s");
  };
  watch.end_job = [&](const std::string& message) { ended.push_back(message); };
  // Never done: only the watch can end the wait.
  const Status s = PollWithPeerWatch([]() -> StatusOr<bool> { return false; }, watch);
  EXPECT_EQ(checks, 3);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_NE(ended[0].find("rank 2 (pid 77"), std::string::npos);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rank 2"), std::string::npos);
}

}  // namespace
}  // namespace tierflow::comm

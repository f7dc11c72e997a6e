// Heartbeat files: peers that beat are alive, one that stops beating is
// named once stale_after has passed without a new beat, and a directory
// the ranks do not share is reported by CheckShared. Two "ranks" in one
// process, each its own Liveness.
#include "comm/liveness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/common/scratch_dir.h"

namespace tierflow::comm {
namespace {

using std::chrono::milliseconds;

TEST(Liveness, AStoppedPeerIsNamedAfterStaleAfterAndNotBefore) {
  testing_common::ScratchDir dir("tierflow-liveness-");
  auto a = Liveness::Start(dir.path(), 0, 2, milliseconds(50), milliseconds(600));
  auto b = Liveness::Start(dir.path(), 1, 2, milliseconds(50), milliseconds(600));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->CheckShared().ok());
  // Beating: never stale, however long we look.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ((*a)->StalePeer(), std::nullopt);
    std::this_thread::sleep_for(milliseconds(100));
  }
  b->reset();  // rank 1 stops beating (and its file goes)
  EXPECT_EQ((*a)->StalePeer(), std::nullopt) << "not before stale_after";
  std::this_thread::sleep_for(milliseconds(800));
  const std::optional<std::string> stale = (*a)->StalePeer();
  ASSERT_TRUE(stale.has_value());
  EXPECT_NE(stale->find("rank 1 (pid "), std::string::npos) << *stale;
  EXPECT_NE(stale->find("has not been heard from"), std::string::npos) << *stale;
  // Its file is gone: the directory no longer shows every rank.
  const Status shared = (*a)->CheckShared();
  EXPECT_EQ(shared.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.message().find("does not see rank 1"), std::string::npos);
}

TEST(Liveness, RefusesImpossibleSettings) {
  testing_common::ScratchDir dir("tierflow-liveness-bad-");
  EXPECT_FALSE(Liveness::Start(dir.path(), 2, 2, milliseconds(50), milliseconds(600)).ok());
  EXPECT_FALSE(Liveness::Start(dir.path(), 0, 2, milliseconds(600), milliseconds(600)).ok());
  EXPECT_FALSE(
      Liveness::Start("/proc/not-a-place", 0, 2, milliseconds(50), milliseconds(600)).ok());
}

}  // namespace
}  // namespace tierflow::comm

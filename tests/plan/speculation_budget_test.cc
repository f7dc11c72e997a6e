// The speculation budget from free host memory, by hand: each speculated
// parameter costs its new weights (2 B in bf16) and, while the engine's
// backup still covers host-tier state, 12 B of backup.
#include <gtest/gtest.h>

#include "plan/speculation_budget.h"

namespace tierflow {
namespace {

SpeculationBudgetInput In(uint64_t free_bytes, int64_t params, int64_t host_params) {
  SpeculationBudgetInput in;
  in.free_host_bytes = free_bytes;
  in.params = params;
  in.host_state_params = host_params;
  in.state_bytes_per_param = 12;
  in.weight_bytes_per_param = 2;
  return in;
}

TEST(SpeculationBudget, AllStateOnHost) {
  // 1000 params on host: 14 B each.
  EXPECT_EQ(SpeculationBudget(In(0, 1000, 1000)), 0);
  EXPECT_EQ(SpeculationBudget(In(13, 1000, 1000)), 0);
  EXPECT_EQ(SpeculationBudget(In(14, 1000, 1000)), 1);
  EXPECT_EQ(SpeculationBudget(In(14 * 500 + 13, 1000, 1000)), 500);
  EXPECT_EQ(SpeculationBudget(In(14 * 1000, 1000, 1000)), 1000);
  EXPECT_EQ(SpeculationBudget(In(1ull << 40, 1000, 1000)), 1000);  // never more than the model
}

TEST(SpeculationBudget, AllStateOnNvmeCostsOnlyTheNewWeights) {
  // Two copies on NVMe make rollback free: 2 B each.
  EXPECT_EQ(SpeculationBudget(In(1, 1000, 0)), 0);
  EXPECT_EQ(SpeculationBudget(In(2 * 300 + 1, 1000, 0)), 300);
  EXPECT_EQ(SpeculationBudget(In(2000, 1000, 0)), 1000);
}

TEST(SpeculationBudget, SplitState) {
  // 400 params on host, 600 on NVMe: the backup covers min(B, 400) params,
  // so up to 400 cost 14 B each (5600), past that 2 B each.
  EXPECT_EQ(SpeculationBudget(In(14 * 400 - 1, 1000, 400)), 399);
  EXPECT_EQ(SpeculationBudget(In(14 * 400, 1000, 400)), 400);
  EXPECT_EQ(SpeculationBudget(In(14 * 400 + 2 * 250, 1000, 400)), 650);
  EXPECT_EQ(SpeculationBudget(In(14 * 400 + 2 * 600, 1000, 400)), 1000);
  EXPECT_EQ(SpeculationBudget(In(1ull << 40, 1000, 400)), 1000);
  // The cost the engine allocates for those budgets.
  EXPECT_EQ(SpeculationBackupBytes(650, 400, 12), 400u * 12);
  EXPECT_EQ(SpeculationBackupBytes(300, 400, 12), 300u * 12);
  EXPECT_EQ(SpeculationPinnedBytes(650, 2), 1300u);
}

TEST(SpeculationBudget, Fp32WeightsAndLion) {
  // fp32 new weights (4 B) and one moment (state 8 B): 12 B with backup.
  SpeculationBudgetInput in = In(12 * 100 + 4 * 50, 1000, 100);
  in.state_bytes_per_param = 8;
  in.weight_bytes_per_param = 4;
  EXPECT_EQ(SpeculationBudget(in), 150);
}

}  // namespace
}  // namespace tierflow

// Shared by the planner's tests: a plan that must compute.
#pragma once

#include <gtest/gtest.h>

#include "plan/planner.h"

namespace tierflow::plan_test {

// ComputePlan's plan; a failed test (and an empty plan) when it errs.
inline Plan MustPlan(const PlanInput& in, const Hardware& hw) {
  auto plan = ComputePlan(in, hw);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : Plan{};
}

}  // namespace tierflow::plan_test

// Shared by the planner's tests: a plan that must compute.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "plan/planner.h"

namespace tierflow::plan_test {

// ComputePlan's plan; a failed test (and an empty plan) when it errs.
inline Plan MustPlan(const PlanInput& in, const Hardware& hw) {
  auto plan = ComputePlan(in, hw);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : Plan{};
}

// The predicted seconds of stage `name`; a failed test (and 0) without it.
inline double Stage(const Plan& plan, const std::string& name) {
  for (const StageTime& s : plan.stages) {
    if (s.name == name) return s.seconds;
  }
  ADD_FAILURE() << "no stage " << name;
  return 0;
}

}  // namespace tierflow::plan_test

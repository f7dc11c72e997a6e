// Shared by the planner's tests: a plan that must compute.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "plan/hardware_profile.h"
#include "plan/memory_model.h"
#include "plan/planner.h"

namespace tierflow::plan_test {

// As `tierflow plan --gpu-memory N` sees a GPU: the card's total, less the
// CUDA context reserve; `cores` host cores, the default rates.
inline Hardware Gpu(uint64_t device, uint64_t host, uint64_t nvme, int cores = 16) {
  Hardware hw;
  hw.device_is_gpu = true;
  hw.device_memory_bytes = device;
  hw.device_reserved_bytes = kCudaContextBytes;
  hw.host_memory_bytes = host;
  hw.nvme_capacity_bytes = nvme;
  hw.cores = cores;
  hw.bandwidths = DefaultBandwidths(true, hw.cores);
  return hw;
}

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

// `bench kernels` at its small shapes: on the CPU device every case runs and
// reports finite figures against the peaks measured in the same run (the
// GEMM is the compute peak, so its ratio is 1; every bandwidth-bound case's
// ratio is to the copy); on the simulated H100 the
// peaks are the profile's spec and no case can beat the roofline the sim
// times it by (each ratio at most the profile's efficiency).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "bench/kernel_bench.h"
#include "tierflow/device.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

std::unique_ptr<Device> Make(DeviceChoice kind, const char* profile = nullptr) {
  DeviceOptions o;
  o.kind = kind;
  if (profile != nullptr) o.sim = FindBuiltinSimProfile(profile).value();
  o.memory_capacity_bytes = uint64_t{1} << 30;
  auto d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

const std::set<std::string> kCases = {"gemm",
                                      "attention_fwd_t128",
                                      "attention_bwd_t128",
                                      "attention_fwd_t256",
                                      "attention_bwd_t256",
                                      "lm_head_logits",
                                      "lm_head_dw",
                                      "elementwise",
                                      "rmsnorm_fwd",
                                      "rmsnorm_bwd",
                                      "layernorm_fwd",
                                      "layernorm_bwd",
                                      "rope_fwd",
                                      "rope_bwd",
                                      "swiglu_fwd",
                                      "swiglu_bwd",
                                      "gelu_fwd",
                                      "gelu_bwd",
                                      "bias_add",
                                      "bias_bwd",
                                      "embedding_fwd",
                                      "embedding_bwd",
                                      "cross_entropy",
                                      "cross_entropy_grad_slice",
                                      "grad_cast"};

// The cases timed against the bandwidth peak: every one but the GEMMs and attention.
bool MemoryBound(const std::string& name) {
  return name != "gemm" && name.rfind("attention_", 0) != 0 && name.rfind("lm_head", 0) != 0;
}

TEST(KernelBench, CpuFiguresAreFiniteAgainstPeaksMeasuredInTheSameRun) {
  auto device = Make(DeviceChoice::kCpu);
  KernelBenchOptions o;
  o.small = true;
  o.iterations = 1;
  auto r = RunKernelBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::set<std::string> names;
  for (const KernelFigure& f : r->figures) {
    names.insert(f.name);
    EXPECT_GT(f.seconds, 0) << f.name;
    EXPECT_TRUE(std::isfinite(f.ratio) && f.ratio > 0) << f.name << " " << f.ratio;
    EXPECT_GT(f.gb_per_s, 0) << f.name;
    EXPECT_EQ(f.memory_bound, MemoryBound(f.name)) << f.name;
    if (f.memory_bound) {
      // Its ratio is to the copy measured in the same run.
      EXPECT_DOUBLE_EQ(f.ratio, f.gb_per_s / r->peak_gb_per_s) << f.name;
      EXPECT_EQ(f.tflops, 0) << f.name;
    } else {
      EXPECT_GT(f.tflops, 0) << f.name;
    }
  }
  EXPECT_EQ(names, kCases);
  // The compute peak is the fastest GEMM case: its ratio is 1, the others' at most 1.
  double best = 0;
  for (const KernelFigure& f : r->figures) {
    if (f.name == "gemm" || f.name.rfind("lm_head", 0) == 0) {
      best = std::max(best, f.tflops);
      EXPECT_LE(f.ratio, 1.0) << f.name;
    }
  }
  EXPECT_EQ(r->peak_tflops, best);
  EXPECT_GT(r->peak_gb_per_s, 0);
  EXPECT_NE(r->peak_source.find("measured"), std::string::npos);
}

TEST(KernelBench, SimPeaksAreTheProfilesSpecAndNoCaseBeatsItsRoofline) {
  auto device = Make(DeviceChoice::kSim, "h100-sxm");
  const SimProfile p = FindBuiltinSimProfile("h100-sxm").value();
  KernelBenchOptions o;
  o.small = true;
  o.iterations = 1;
  auto r = RunKernelBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->peak_tflops, p.tensor_tflops);
  EXPECT_EQ(r->peak_gb_per_s, p.hbm_gb_per_s);
  EXPECT_NE(r->peak_source.find("h100-sxm"), std::string::npos);
  ASSERT_EQ(r->figures.size(), kCases.size());
  for (const KernelFigure& f : r->figures) {
    const double limit = f.memory_bound ? p.hbm_efficiency : p.tensor_efficiency;
    EXPECT_GT(f.ratio, 0) << f.name;
    EXPECT_LE(f.ratio, limit * 1.001) << f.name;
  }
}

TEST(KernelBench, RefusesNoIterations) {
  auto device = Make(DeviceChoice::kCpu);
  KernelBenchOptions o;
  o.iterations = 0;
  EXPECT_EQ(RunKernelBench(*device, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow

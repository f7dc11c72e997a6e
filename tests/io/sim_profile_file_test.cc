// Simulated GPU profiles given as JSON files (--device sim:FILE).
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "io/sim_profile_file.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

std::string Write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr const char* kFull = R"({"name": "my-gpu", "tensor_tflops": 100, "vector_tflops": 20,
  "hbm_gb_per_s": 900, "link_gb_per_s": 16, "memory_gib": 12, "tensor_efficiency": 0.5,
  "launch_overhead_us": 2})";

TEST(SimProfileFile, BuiltinNamesResolveWithoutAFile) {
  auto p = ResolveSimProfile("a100-80gb");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "a100-80gb");
  EXPECT_EQ(ResolveSimProfile("no-such-gpu").status().code(), StatusCode::kNotFound);
}

TEST(SimProfileFile, ReadsEveryFieldAndKeepsDefaultsForTheOptionalOnes) {
  testing_common::ScratchDir dir("sim_profile");
  auto p = ResolveSimProfile(Write(dir.path(), "gpu.json", kFull));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "my-gpu");
  EXPECT_EQ(p->tensor_tflops, 100);
  EXPECT_EQ(p->vector_tflops, 20);
  EXPECT_EQ(p->hbm_gb_per_s, 900);
  EXPECT_EQ(p->link_gb_per_s, 16);
  EXPECT_EQ(p->memory_gib, 12);
  EXPECT_EQ(p->tensor_efficiency, 0.5);
  EXPECT_EQ(p->launch_overhead_us, 2);
  EXPECT_EQ(p->hbm_efficiency, SimProfile().hbm_efficiency);
}

TEST(SimProfileFile, RefusesUnknownKeysMissingFieldsAndBadValuesNamingThem) {
  testing_common::ScratchDir dir("sim_profile_bad");
  const struct {
    const char* json;
    const char* expect;
  } cases[] = {
      {R"({"tensor_tflops": 1, "vector_tflops": 1, "hbm_gb_per_s": 1, "link_gb_per_s": 1,
          "memory_gib": 1, "tensor_tflop": 2})",
       "tensor_tflop: unknown key"},
      {R"({"tensor_tflops": 1, "vector_tflops": 1, "hbm_gb_per_s": 1, "link_gb_per_s": 1})",
       "memory_gib: missing"},
      {R"({"tensor_tflops": "fast", "vector_tflops": 1, "hbm_gb_per_s": 1, "link_gb_per_s": 1,
          "memory_gib": 1})",
       "tensor_tflops: expected a number"},
      {R"({"tensor_tflops": 1, "vector_tflops": 1, "hbm_gb_per_s": 1, "link_gb_per_s": 1,
          "memory_gib": 1, "link_efficiency": 2})",
       "link_efficiency must be in (0, 1]"},
      {R"({"tensor_tflops": -1, "vector_tflops": 1, "hbm_gb_per_s": 1, "link_gb_per_s": 1,
          "memory_gib": 1})",
       "tensor_tflops must be a finite number > 0"},
      {"[1, 2]", "expected an object"},
      {"{", "gpu.json"},
  };
  for (const auto& c : cases) {
    const std::string path = Write(dir.path(), "gpu.json", c.json);
    auto p = ResolveSimProfile(path);
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos)
        << p.status().message() << " (wanted: " << c.expect << ")";
    EXPECT_NE(p.status().message().find("gpu.json"), std::string::npos) << p.status().message();
  }
  EXPECT_EQ(ResolveSimProfile(dir.path() + "/missing.json").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tierflow

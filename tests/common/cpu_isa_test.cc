// The instruction-set levels: names, parsing, the TIERFLOW_ISA choice and its
// errors (as a pure function; tests/train/isa_resume_test.cc runs the binary
// with TIERFLOW_ISA set), and what this CPU reports.
#include "common/cpu_isa.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tierflow {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CpuIsa, NamesRoundTripAndUnknownNamesAreNamedInTheError) {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    auto parsed = ParseIsa(IsaName(isa));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, isa);
  }
  auto bad = ParseIsa("avx9");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "'avx9'")) << bad.status().message();
  EXPECT_TRUE(Contains(bad.status().message(), "baseline, avx2, avx512"));
  EXPECT_FALSE(ParseIsa("AVX2").ok()) << "names are exact";
  EXPECT_FALSE(ParseIsa("").ok());
}

TEST(CpuIsa, UnsetChoosesTheHighestSupportedLevel) {
  const std::vector<Isa> all = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};
  EXPECT_EQ(*ChooseIsa(nullptr, all), Isa::kAvx512);
  EXPECT_EQ(*ChooseIsa("", all), Isa::kAvx512);
  EXPECT_EQ(*ChooseIsa(nullptr, {Isa::kBaseline, Isa::kAvx2}), Isa::kAvx2);
  EXPECT_EQ(*ChooseIsa(nullptr, {Isa::kBaseline}), Isa::kBaseline);
}

TEST(CpuIsa, ForcedLevelIsUsedWhenSupported) {
  const std::vector<Isa> all = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};
  EXPECT_EQ(*ChooseIsa("baseline", all), Isa::kBaseline);
  EXPECT_EQ(*ChooseIsa("avx2", all), Isa::kAvx2);
  EXPECT_EQ(*ChooseIsa("avx512", all), Isa::kAvx512);
}

TEST(CpuIsa, ForcingALevelTheCpuLacksIsAnErrorNamingWhatItHas) {
  auto r = ChooseIsa("avx512", {Isa::kBaseline, Isa::kAvx2});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_TRUE(Contains(m, "TIERFLOW_ISA=avx512")) << m;
  EXPECT_TRUE(Contains(m, "cannot run the avx512 level")) << m;
  EXPECT_TRUE(Contains(m, "supports baseline, avx2")) << m;
}

TEST(CpuIsa, UnknownForcedLevelIsAnErrorNamingTheChoices) {
  auto r = ChooseIsa("sse4", {Isa::kBaseline, Isa::kAvx2});
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_TRUE(Contains(m, "TIERFLOW_ISA=sse4")) << m;
  EXPECT_TRUE(Contains(m, "use one of baseline, avx2, avx512")) << m;
  EXPECT_TRUE(Contains(m, "this CPU supports baseline, avx2")) << m;
}

TEST(CpuIsa, SupportedLevelsAreAscendingFromBaselineAndSelectionIsOneOfThem) {
  const std::vector<Isa> supported = SupportedIsas();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), Isa::kBaseline);
  for (size_t i = 0; i < supported.size(); ++i) {
    EXPECT_TRUE(CpuSupportsIsa(supported[i]));
    EXPECT_EQ(static_cast<int>(supported[i]), static_cast<int>(i)) << "levels are cumulative";
  }
  auto selected = SelectedIsa();
  ASSERT_TRUE(selected.ok()) << selected.status().ToString();
  EXPECT_TRUE(CpuSupportsIsa(*selected));
  EXPECT_EQ(*selected, *ChooseIsa(std::getenv("TIERFLOW_ISA"), supported));
}

TEST(CpuIsa, ExplicitUnsupportedLevelIsFailedPrecondition) {
  EXPECT_TRUE(CheckIsaSupported(Isa::kBaseline, "X").ok());
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    Status s = CheckIsaSupported(isa, "ConvertBuffer");
    if (CpuSupportsIsa(isa)) {
      EXPECT_TRUE(s.ok());
    } else {
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
      EXPECT_TRUE(Contains(s.message(), "ConvertBuffer")) << s.message();
      EXPECT_TRUE(Contains(s.message(), std::string(IsaName(isa)))) << s.message();
    }
  }
}

}  // namespace
}  // namespace tierflow

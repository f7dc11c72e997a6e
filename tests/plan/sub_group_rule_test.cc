// The two sub-group rules (tierflow/sub_group_rule.h): CutUnit on its own,
// the engine's MakeSubGroups on real transformer layouts (DeepSpeed's rule
// never cuts a tensor and closes a group at N or more), and the planner's
// SummarizeSubGroups agreeing with the engine's layout under both rules,
// including which sub-groups an NVMe ratio puts on NVMe.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/partition.h"
#include "engine/sub_groups.h"
#include "model/param_layout.h"
#include "optim/grad_stats.h"
#include "plan/memory_model.h"
#include "tierflow/sub_group_rule.h"

namespace tierflow {
namespace {

using Sizes = std::vector<uint64_t>;

TEST(CutUnit, SlicesAreAtMostNAndIgnoreTensors) {
  EXPECT_EQ(CutUnit({10, 7}, SubGroupRule{SubGroupCut::kSlices, 5}), (Sizes{5, 5, 5, 2}));
  EXPECT_EQ(CutUnit({17}, SubGroupRule{SubGroupCut::kSlices, 17}), (Sizes{17}));
  EXPECT_EQ(CutUnit({17}, SubGroupRule{SubGroupCut::kSlices, 100}), (Sizes{17}));
}

TEST(CutUnit, WholeTensorsCloseAGroupOnceItHoldsAtLeastN) {
  const Sizes tensors{3, 4, 10, 1, 1, 2};
  EXPECT_EQ(CutUnit(tensors, SubGroupRule{SubGroupCut::kWholeTensors, 5}), (Sizes{7, 10, 4}));
  EXPECT_EQ(CutUnit(tensors, SubGroupRule{SubGroupCut::kWholeTensors, 0}),
            (Sizes{3, 4, 10, 1, 1, 2}));
  EXPECT_EQ(CutUnit(tensors, SubGroupRule{SubGroupCut::kWholeTensors, 1}),
            (Sizes{3, 4, 10, 1, 1, 2}));
  EXPECT_EQ(CutUnit(tensors, SubGroupRule{SubGroupCut::kWholeTensors, 1000000}), (Sizes{21}));
  EXPECT_EQ(CutUnit({0, 4, 0}, SubGroupRule{SubGroupCut::kWholeTensors, 0}), (Sizes{4}));
  EXPECT_NE(DescribeSubGroupRule(SubGroupRule{SubGroupCut::kWholeTensors, 0}).find("one tensor"),
            std::string::npos);
}

TEST(MakeSubGroups, RefusesSlicesOfNothingAndTensorsThatDoNotSumToTheUnit) {
  const std::vector<UnitInfo> units{{"a", 10, {4, 6}}};
  EXPECT_FALSE(MakeSubGroups(units, SubGroupRule{SubGroupCut::kSlices, 0}).ok());
  EXPECT_TRUE(MakeSubGroups(units, SubGroupRule{SubGroupCut::kWholeTensors, 0}).ok());
  const std::vector<UnitInfo> empty{{"e", 0, {}}};
  EXPECT_NE(MakeSubGroups(empty, SubGroupRule{}).status().message().find("no parameters"),
            std::string::npos);
  const std::vector<UnitInfo> bad{{"b", 10, {4, 5}}};
  auto refused = MakeSubGroups(bad, SubGroupRule{SubGroupCut::kWholeTensors, 0});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'b'"), std::string::npos);
}

// A data-parallel rank's share: only its part of each unit, a tensor
// crossing the part's edge counted as the piece inside, offsets into the
// whole unit kept, the parts packed one after another; an empty part has no
// sub-groups, and a part outside its unit is refused.
TEST(MakeSubGroupsOfParts, CutsOnlyThePartAndKeepsUnitOffsets) {
  const std::vector<UnitInfo> units{{"a", 10, {4, 6}}, {"b", 5, {}}, {"c", 8, {8}}};
  auto parts = MakeSubGroupsOfParts(units, SubGroupRule{SubGroupCut::kWholeTensors, 0}, {2, 0, 3},
                                    {6, 0, 5});
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->groups.size(), 3u);  // a: [2, 4) and [4, 8); b: none; c: [3, 8)
  EXPECT_EQ(parts->groups[0].unit_offset, 2u);
  EXPECT_EQ(parts->groups[0].num_params, 2u);
  EXPECT_EQ(parts->groups[1].unit_offset, 4u);
  EXPECT_EQ(parts->groups[1].num_params, 4u);
  EXPECT_EQ(parts->groups[1].global_offset, 2u);
  EXPECT_EQ(parts->groups[2].unit, 2);
  EXPECT_EQ(parts->groups[2].unit_offset, 3u);
  EXPECT_EQ(parts->groups[2].global_offset, 6u);
  EXPECT_TRUE(parts->by_unit[1].empty());
  EXPECT_EQ(parts->total_params, 11u);
  EXPECT_EQ(parts->unit_offsets, (Sizes{0, 6, 6, 11}));
  EXPECT_EQ(parts->part_begins, (Sizes{2, 0, 3}));
  EXPECT_EQ(parts->max_unit_params, 6u);
  auto sliced =
      MakeSubGroupsOfParts(units, SubGroupRule{SubGroupCut::kSlices, 4}, {2, 0, 3}, {6, 0, 5});
  ASSERT_TRUE(sliced.ok());
  EXPECT_EQ(sliced->groups.size(), 4u);  // a: 4 + 2; c: 4 + 1
  EXPECT_EQ(sliced->groups[1].unit_offset, 6u);
  auto outside = MakeSubGroupsOfParts(units, SubGroupRule{}, {2, 0, 3}, {9, 0, 5});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("outside unit 'a'"), std::string::npos);
}

// Planner and engine, one model and rule: the same counts, the same largest
// group and unit, and the same NVMe share (sub-groups whose first parameter
// is at or beyond llround((1 - r) P)). With several ranks, the engine's
// layout of rank 0's parts (data_parallel.cc cuts them so), which is the
// largest and the one the planner sizes every rank by.
void ExpectPlannerMatchesEngine(const std::string& preset, SubGroupRule rule, int ranks = 1) {
  SCOPED_TRACE(preset + ", " + DescribeSubGroupRule(rule) + ", " + std::to_string(ranks) +
               " ranks");
  auto config = PresetModelConfig(preset);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto layout = MakeParamLayout(*config);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<uint64_t> begin, params;
  uint64_t max_whole_unit = 0;
  for (const UnitInfo& unit : layout->units) {
    auto part = comm::Partition::Even(unit.num_params, ranks, kGradStatsChunkElems);
    ASSERT_TRUE(part.ok());
    for (int r = 1; r < ranks; ++r) ASSERT_LE(part->size(r), part->size(0));  // rank 0's is largest
    begin.push_back(part->begin(0));
    params.push_back(part->size(0));
    EXPECT_EQ(RankPartParams(static_cast<int64_t>(unit.num_params), ranks),
              static_cast<int64_t>(part->size(0)));
    max_whole_unit = std::max<uint64_t>(max_whole_unit, unit.num_params);
  }
  auto groups = MakeSubGroupsOfParts(layout->units, rule, begin, params);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  for (double ratio : {0.0, 0.3, 1.0}) {
    const SubGroupSummary s = SummarizeSubGroups(*config, rule, ratio, 12, kNvmeBlockBytes, ranks);
    EXPECT_EQ(s.params, static_cast<int64_t>(groups->total_params)) << ratio;
    const auto host_target = static_cast<uint64_t>(
        std::llround((1.0 - ratio) * static_cast<double>(groups->total_params)));
    int64_t nvme_groups = 0, nvme_params = 0, max_nvme = 0;
    for (const SubGroup& g : groups->groups) {
      if (ratio > 0 && g.global_offset >= host_target) {
        ++nvme_groups;
        nvme_params += static_cast<int64_t>(g.num_params);
        max_nvme = std::max(max_nvme, static_cast<int64_t>(g.num_params));
      }
    }
    EXPECT_EQ(s.num_sub_groups, static_cast<int64_t>(groups->groups.size())) << ratio;
    EXPECT_EQ(s.max_group_params, static_cast<int64_t>(groups->max_group_params)) << ratio;
    EXPECT_EQ(s.max_unit_params, static_cast<int64_t>(max_whole_unit)) << ratio;
    EXPECT_EQ(s.nvme_sub_groups, nvme_groups) << ratio;
    EXPECT_EQ(s.nvme_params, nvme_params) << ratio;
    EXPECT_EQ(s.max_nvme_group_params, max_nvme) << ratio;
  }
}

TEST(SubGroupRules, ThePlannerSeesEachRanksLayout) {
  // The planner's part size is the engine's partition (kRankPartAlignParams
  // is the norm's chunk the parts are cut at).
  static_assert(kRankPartAlignParams == static_cast<int64_t>(kGradStatsChunkElems));
  for (int ranks : {2, 3, 8}) {
    for (const char* preset : {"tiny-gpt2", "tiny-llama", "llama-1b"}) {
      ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kSlices, 40000}, ranks);
      ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kSlices, uint64_t{4} << 20},
                                 ranks);
      ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kWholeTensors, 0}, ranks);
      ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kWholeTensors, 1000000}, ranks);
    }
  }
}

TEST(SubGroupRules, ThePlannerSeesTheEnginesLayout) {
  for (const char* preset : {"tiny-gpt2", "tiny-llama", "llama-1b"}) {
    ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kSlices, 40000});
    ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kSlices, uint64_t{4} << 20});
    ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kWholeTensors, 0});
    ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kWholeTensors, 1000000});
    ExpectPlannerMatchesEngine(preset, SubGroupRule{SubGroupCut::kWholeTensors, 1000000000000});
  }
}

// DeepSpeed's rule on a real layout: every boundary is a tensor boundary,
// and every group but a unit's last holds at least N.
TEST(SubGroupRules, WholeTensorsNeverCutATensor) {
  auto config = PresetModelConfig("tiny-llama");
  ASSERT_TRUE(config.ok());
  auto layout = MakeParamLayout(*config);
  ASSERT_TRUE(layout.ok());
  const uint64_t n = 40000;
  auto groups = MakeSubGroups(layout->units, SubGroupRule{SubGroupCut::kWholeTensors, n});
  ASSERT_TRUE(groups.ok());
  for (size_t u = 0; u < layout->units.size(); ++u) {
    std::set<uint64_t> starts{0};
    for (const TensorSlot& t : layout->tensors[u]) starts.insert(static_cast<uint64_t>(t.offset));
    const std::vector<int>& mine = groups->by_unit[u];
    ASSERT_FALSE(mine.empty());
    for (size_t k = 0; k < mine.size(); ++k) {
      const SubGroup& g = groups->groups[mine[k]];
      EXPECT_TRUE(starts.count(g.unit_offset)) << g.name << " starts inside a tensor";
      if (k + 1 < mine.size()) {
        EXPECT_GE(g.num_params, n) << g.name;
      }
    }
  }
}

}  // namespace
}  // namespace tierflow

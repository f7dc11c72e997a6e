// How each parameter unit (embeddings, a block, the head) is cut into the
// optimizer's sub-groups: the pieces the CPU optimizer updates and the state
// tiers move one at a time. Two rules, because two tools mean different
// things by a "sub-group size":
//   kSlices       tierflow's own (--sub-group-size, tierflow.sub_group_size):
//                 consecutive slices of at most N parameters (N >= 1); a
//                 tensor may span slices, so the largest sub-group, which
//                 sizes the weight staging and NVMe slots, is bounded.
//   kWholeTensors DeepSpeed's (zero_optimization.sub_group_size at stage 3):
//                 whole tensors in order, a sub-group closing once it holds
//                 at least N parameters (0: every tensor is its own).
// Under either rule a sub-group never spans two units (the engine hands a
// unit back to the device once its own sub-groups are done), so a unit's last
// sub-group may hold less than N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tierflow {

enum class SubGroupCut : uint8_t { kSlices, kWholeTensors };

struct SubGroupRule {
  SubGroupCut cut = SubGroupCut::kSlices;
  uint64_t params = uint64_t{4} << 20;  // N above
};

// The sizes of one unit's sub-groups, in order, given its tensors' sizes in
// order (a single entry: the unit as one tensor). Zero-sized tensors are
// skipped. REQUIRES: rule.params >= 1 for kSlices.
std::vector<uint64_t> CutUnit(const std::vector<uint64_t>& tensor_params, SubGroupRule rule);

// "slices of at most 4Mi parameters", "whole tensors, at least 1G parameters
// each (DeepSpeed's sub_group_size)", "one tensor each (DeepSpeed's
// sub_group_size 0)".
std::string DescribeSubGroupRule(SubGroupRule rule);

}  // namespace tierflow

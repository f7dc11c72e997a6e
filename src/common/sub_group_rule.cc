// Cutting one unit into sub-groups (include/tierflow/sub_group_rule.h).
#include "tierflow/sub_group_rule.h"

#include <algorithm>

namespace tierflow {

std::vector<uint64_t> CutUnit(const std::vector<uint64_t>& tensor_params, SubGroupRule rule) {
  std::vector<uint64_t> groups;
  if (rule.cut == SubGroupCut::kSlices) {
    uint64_t n = 0;
    for (uint64_t t : tensor_params) n += t;
    for (uint64_t off = 0; off < n; off += rule.params) {
      groups.push_back(std::min(rule.params, n - off));
    }
    return groups;
  }
  uint64_t open = 0;
  for (uint64_t t : tensor_params) {
    if (t == 0) continue;
    open += t;
    if (open >= rule.params) {
      groups.push_back(open);
      open = 0;
    }
  }
  if (open > 0) groups.push_back(open);
  return groups;
}

std::string DescribeSubGroupRule(SubGroupRule rule) {
  if (rule.cut == SubGroupCut::kSlices) {
    return "slices of at most " + std::to_string(rule.params) + " parameters";
  }
  if (rule.params == 0) return "one tensor each (DeepSpeed's sub_group_size 0)";
  return "whole tensors, at least " + std::to_string(rule.params) +
         " parameters each (DeepSpeed's sub_group_size)";
}

}  // namespace tierflow

// The speculation budget from free host memory.
#include "plan/speculation_budget.h"

#include <algorithm>

#include "common/checked_math.h"

namespace tierflow {
namespace {

uint64_t U(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

}  // namespace

uint64_t SpeculationPinnedBytes(int64_t speculation_params, uint64_t weight_bytes_per_param) {
  return SaturatingMul(U(speculation_params), weight_bytes_per_param);
}

uint64_t SpeculationBackupBytes(int64_t speculation_params, int64_t host_state_params,
                                uint64_t state_bytes_per_param) {
  return SaturatingMul(std::min(U(speculation_params), U(host_state_params)),
                       state_bytes_per_param);
}

int64_t SpeculationBudget(const SpeculationBudgetInput& in) {
  const uint64_t p = U(in.params);
  const uint64_t h = std::min(U(in.host_state_params), p);
  const uint64_t w = std::max<uint64_t>(in.weight_bytes_per_param, 1);  // no dtype is smaller
  const uint64_t with_backup = SaturatingAdd(w, in.state_bytes_per_param);
  // The first h parameters may each need a backup (the engine sizes it for
  // min(B, h)); past them only the new weights cost.
  const uint64_t host_part = SaturatingMul(h, with_backup);
  if (in.free_host_bytes < host_part) {
    return static_cast<int64_t>(in.free_host_bytes / with_backup);
  }
  const uint64_t rest = (in.free_host_bytes - host_part) / w;
  return static_cast<int64_t>(h + std::min(rest, p - h));
}

}  // namespace tierflow

// Optimizer state in host RAM.
#include "engine/host_state_tier.h"

#include <algorithm>
#include <cstring>

#include "common/units.h"

namespace tierflow {

StatusOr<std::unique_ptr<HostStateTier>> HostStateTier::Create(const SubGroupLayout& layout,
                                                               bool lock) {
  std::unique_ptr<HostStateTier> tier(new HostStateTier(layout));
  const size_t num_bytes = std::max<size_t>(layout.total_params * sizeof(float), 64);
  for (HostPages* a : {&tier->master_, &tier->exp_avg_, &tier->exp_avg_sq_}) {
    auto pages = HostPages::Allocate(num_bytes, "optimizer state");
    if (!pages.ok()) {
      return OutOfMemoryError("host memory: cannot allocate " + FormatBytes(3 * num_bytes) +
                              " of optimizer state; put it on NVMe (--offload-optimizer nvme) "
                              "or run `tierflow plan` to see what fits");
    }
    *a = std::move(*pages);
    if (lock) TF_RETURN_IF_ERROR(a->Lock("optimizer state (pin_memory)"));
  }
  return tier;
}

Status HostStateTier::Write(int g, const float* master, const float* exp_avg,
                            const float* exp_avg_sq) {
  const SubGroup& sg = layout_.groups.at(g);
  const size_t n = sg.num_params, off = sg.global_offset;
  std::memcpy(master_.as<float>() + off, master, n * sizeof(float));
  if (exp_avg)
    std::memcpy(exp_avg_.as<float>() + off, exp_avg, n * sizeof(float));
  else
    std::memset(exp_avg_.as<float>() + off, 0, n * sizeof(float));
  if (exp_avg_sq)
    std::memcpy(exp_avg_sq_.as<float>() + off, exp_avg_sq, n * sizeof(float));
  else
    std::memset(exp_avg_sq_.as<float>() + off, 0, n * sizeof(float));
  return Status::Ok();
}

Status HostStateTier::Read(int g, float* master, float* exp_avg, float* exp_avg_sq) {
  const SubGroup& sg = layout_.groups.at(g);
  const size_t n = sg.num_params, off = sg.global_offset;
  if (master) std::memcpy(master, master_.as<float>() + off, n * sizeof(float));
  if (exp_avg) std::memcpy(exp_avg, exp_avg_.as<float>() + off, n * sizeof(float));
  if (exp_avg_sq) std::memcpy(exp_avg_sq, exp_avg_sq_.as<float>() + off, n * sizeof(float));
  return Status::Ok();
}

StatusOr<StateView> HostStateTier::Acquire(int g) {
  const size_t off = layout_.groups.at(g).global_offset;
  return StateView{master_.as<float>() + off, exp_avg_.as<float>() + off,
                   exp_avg_sq_.as<float>() + off};
}

Status HostStateTier::Unsupported(int g) const {
  return InternalError("the host state tier updates in place and keeps no second copy (sub-group " +
                       layout_.groups.at(g).name + "): the engine must use its backup");
}

TierStats HostStateTier::Stats() const {
  TierStats s;
  s.host_bytes = 3 * layout_.total_params * sizeof(float);
  return s;
}

}  // namespace tierflow

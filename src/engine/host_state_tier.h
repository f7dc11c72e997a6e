// Optimizer state in host RAM: three flat fp32 arrays (master, exp_avg,
// exp_avg_sq) over the whole model, each sub-group a slice of them.
#pragma once

#include <memory>
#include <vector>

#include "common/host_memory.h"
#include "engine/state_tier.h"
#include "engine/sub_groups.h"

namespace tierflow {

class HostStateTier : public StateTier {
 public:
  // Allocates 12 bytes per parameter (zeroed; on huge pages where the kernel
  // allows, common/host_memory.h).
  // Errors: OutOfMemory naming the bytes when the host cannot provide them.
  // `lock`: page-lock the state (HostPages::Lock; DeepSpeed's
  // offload_optimizer.pin_memory), refused with the limit named when the
  // kernel will not.
  static StatusOr<std::unique_ptr<HostStateTier>> Create(const SubGroupLayout& layout,
                                                         bool lock = false);

  std::string_view name() const override { return "host"; }
  Status Write(int g, const float* master, const float* exp_avg, const float* exp_avg_sq) override;
  Status Read(int g, float* master, float* exp_avg, float* exp_avg_sq) override;
  Status Prefetch(int g) override { return Status::Ok(); }
  Status PrefetchWaitingForWrites(int g) override { return Status::Ok(); }
  StatusOr<StateView> Acquire(int g) override;
  Status Release(int g, bool modified) override { return Status::Ok(); }
  bool SpeculatesOutOfPlace() const override { return false; }
  Status ReleaseSpeculative(int g) override { return Unsupported(g); }
  Status Commit(int g) override { return Unsupported(g); }
  Status Abort(int g) override { return Unsupported(g); }
  Status Flush() override { return Status::Ok(); }
  TierStats Stats() const override;

 private:
  explicit HostStateTier(const SubGroupLayout& layout) : layout_(layout) {}
  Status Unsupported(int g) const;

  const SubGroupLayout& layout_;
  HostPages master_, exp_avg_, exp_avg_sq_;
};

}  // namespace tierflow

// --offload-gradients as train resolves it (train/resolve_run.h): the
// configured choice reaches the planner, and the engine is given where the
// plan put the gradients (auto resolved), with the spill slots it counted.
#include <gtest/gtest.h>

#include "plan/hardware_profile.h"
#include "train/resolve_run.h"

namespace tierflow {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

Hardware Machine(uint64_t host) {
  Hardware hw;
  hw.device_is_gpu = true;
  hw.device_memory_bytes = 24 * kGiB;
  hw.device_reserved_bytes = kCudaContextBytes;
  hw.host_memory_bytes = host;
  hw.nvme_capacity_bytes = 1ull << 40;
  hw.cores = 16;
  hw.bandwidths = DefaultBandwidths(true, hw.cores);
  return hw;
}

StatusOr<PlannedRun> Planned(GradOffload where, uint64_t host) {
  TrainConfig c;
  c.offload_gradients = where;
  c.micro_batch = 1;
  c.seq_len = 2048;
  NvmeIoChooser choose = [](const TrainConfig&) -> StatusOr<NvmeIoChoice> {
    return NvmeIoChoice{};
  };
  return PlanTrainingRun(c, *PresetModelConfig("llama-7b"), Machine(host), DeviceKind::kCuda,
                         RunWorldShape{}, 0, 1, choose);
}

TEST(GradOffloadOption, TheEngineGetsWhereThePlanPutTheGradients) {
  // A host too small for the whole gradient: auto spills it.
  auto spilled = Planned(GradOffload::kAuto, 12 * kGiB);
  ASSERT_TRUE(spilled.ok()) << spilled.status().ToString();
  EXPECT_EQ(spilled->input.offload_gradients, GradOffload::kAuto);
  ASSERT_EQ(spilled->plan.placement.gradients, GradOffload::kNvme) << spilled->plan.explanation;
  EngineOptions o = EngineOptionsFor(*spilled, {"/nvme"}, 1);
  EXPECT_EQ(o.grad_offload, GradOffload::kNvme);
  EXPECT_EQ(o.grad_spill_slots, spilled->plan.placement.grad_spill_slots);
  EXPECT_EQ(o.offload, OffloadPlacement::kNvme);
  EXPECT_EQ(o.nvme_ratio, 1.0);

  // Room for it: auto keeps it on the host.
  auto held = Planned(GradOffload::kAuto, 256 * kGiB);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(EngineOptionsFor(*held, {}, 1).grad_offload, GradOffload::kHost);

  // Forced: what was asked, even with room.
  auto forced = Planned(GradOffload::kNvme, 256 * kGiB);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  EXPECT_EQ(forced->input.offload_gradients, GradOffload::kNvme);
  EXPECT_EQ(EngineOptionsFor(*forced, {"/nvme"}, 1).grad_offload, GradOffload::kNvme);
}

}  // namespace
}  // namespace tierflow

// Fault-injection sweep over the NVMe I/O of a small training run: EIO,
// ENOSPC and EROFS on the Nth read or write, short transfers, and flipped
// bits. Each case ends in a clear error or a successful retry (and then in
// exactly the weights of a clean run), and the last good checkpoint always
// verifies and resumes to the same weights as a clean run.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

#include "offload/fault_injecting_backend.h"
#include "offload/io_uring_backend.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) { return testing_common::ReadWholeFile(path); }

TrainConfig SweepConfig(const std::string& out, int64_t steps, bool resume,
                        GradOffload grads = GradOffload::kAuto) {
  TrainConfig c;
  c.offload_gradients = grads;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.steps = steps;
  c.offload = OffloadPlacement::kNvme;
  c.nvme_paths = {out + "/nvme"};
  c.sub_group_size = 100000;
  c.checkpoint_every = 2;
  c.eval_every = 0;
  c.out_dir = out;
  c.device.choice = DeviceChoice::kCpu;
  c.resume = resume;
  return c;
}

struct FaultCase {
  const char* name;
  offload::FaultRule rule;
  // kNvme: the gradient files share the drive and the faults (the run is
  // bit-identical to the gradients in host memory, so the clean weights are
  // the same).
  GradOffload grads = GradOffload::kAuto;
};

class FaultSweepTest : public testing::TestWithParam<FaultCase> {
 protected:
  static void SetUpTestSuite() {
    root_ = (fs::temp_directory_path() / ("tierflow-faults-" + std::to_string(getpid()))).string();
    fs::create_directories(root_);
    TrainReporter quiet;
    auto clean = RunTraining(SweepConfig(root_ + "/clean", 8, false), quiet);
    ASSERT_TRUE(clean.ok()) << clean.status().ToString();
    clean_weights_ = ReadFile(root_ + "/clean/model/model.safetensors");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static std::string root_, clean_weights_;
};
std::string FaultSweepTest::root_, FaultSweepTest::clean_weights_;

TEST_P(FaultSweepTest, EndsInAClearErrorOrARetryAndTheLastCheckpointHolds) {
  const FaultCase& fc = GetParam();
  const std::string out = root_ + "/" + fc.name;
  TrainReporter quiet;
  // Steps 1-4 without faults: checkpoints at 2 and 4.
  ASSERT_TRUE(RunTraining(SweepConfig(out, 4, false, fc.grads), quiet).ok());
  // Steps 5-8 with the fault.
  auto plan = std::make_shared<offload::FaultPlan>();
  plan->Add(fc.rule);
  TrainHooks hooks;
  hooks.nvme_backend_factory =
      offload::FaultInjectingBackendFactory(plan, offload::IoUringBackendFactory());
  auto faulted = RunTraining(SweepConfig(out, 8, true, fc.grads), quiet, nullptr, &hooks);
  ASSERT_GT(plan->num_injected(), 0u) << "the fault never fired: the sweep point is past the run";
  if (faulted.ok()) {
    // A retried fault must leave no trace in the result.
    EXPECT_EQ(ReadFile(out + "/model/model.safetensors"), clean_weights_) << fc.name;
  } else {
    const std::string msg = faulted.status().ToString();
    EXPECT_NE(msg.find(".swap"), std::string::npos)
        << fc.name << ": the error names no file: " << msg;
  }
  // The newest checkpoint verifies and a clean resume reaches the clean weights.
  auto list = ListCheckpoints(out);
  ASSERT_FALSE(list.empty());
  EXPECT_TRUE(list[0].verified) << list[0].problem;
  auto resumed = RunTraining(SweepConfig(out, 8, true, fc.grads), quiet);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(ReadFile(out + "/model/model.safetensors"), clean_weights_) << fc.name;
}

offload::FaultRule Rule(offload::FaultKind kind, std::optional<offload::IoOpKind> op, uint64_t nth,
                        int error = EIO) {
  offload::FaultRule r;
  r.kind = kind;
  r.op_kind = op;
  r.nth = nth;
  r.error = error;
  return r;
}

using offload::FaultKind;
using offload::IoOpKind;
INSTANTIATE_TEST_SUITE_P(
    Faults, FaultSweepTest,
    testing::Values(
        FaultCase{"eio_write_3", Rule(FaultKind::kErrno, IoOpKind::kWrite, 3)},
        FaultCase{"eio_write_40", Rule(FaultKind::kErrno, IoOpKind::kWrite, 40)},
        FaultCase{"enospc_write_10", Rule(FaultKind::kErrno, IoOpKind::kWrite, 10, ENOSPC)},
        FaultCase{"erofs_write_20", Rule(FaultKind::kErrno, IoOpKind::kWrite, 20, EROFS)},
        FaultCase{"eio_read_5", Rule(FaultKind::kErrno, IoOpKind::kRead, 5)},
        FaultCase{"eio_read_30", Rule(FaultKind::kErrno, IoOpKind::kRead, 30)},
        FaultCase{"eagain_any_7", Rule(FaultKind::kErrno, std::nullopt, 7, EAGAIN)},
        FaultCase{"short_write_4", Rule(FaultKind::kShortTransfer, IoOpKind::kWrite, 4)},
        FaultCase{"short_read_6", Rule(FaultKind::kShortTransfer, IoOpKind::kRead, 6)},
        FaultCase{"flipped_bit_read_8", Rule(FaultKind::kFlipBit, IoOpKind::kRead, 8)},
        FaultCase{"flipped_bit_write_12", Rule(FaultKind::kFlipBit, IoOpKind::kWrite, 12)},
        // The same run with the gradients on the drives: its files take
        // their share of the faults.
        FaultCase{"grads_eio_write_3", Rule(FaultKind::kErrno, IoOpKind::kWrite, 3),
                  GradOffload::kNvme},
        FaultCase{"grads_enospc_write_25", Rule(FaultKind::kErrno, IoOpKind::kWrite, 25, ENOSPC),
                  GradOffload::kNvme},
        FaultCase{"grads_short_write_7", Rule(FaultKind::kShortTransfer, IoOpKind::kWrite, 7),
                  GradOffload::kNvme},
        FaultCase{"grads_eio_read_9", Rule(FaultKind::kErrno, IoOpKind::kRead, 9),
                  GradOffload::kNvme},
        FaultCase{"grads_flipped_bit_read_4", Rule(FaultKind::kFlipBit, IoOpKind::kRead, 4),
                  GradOffload::kNvme}),
    [](const testing::TestParamInfo<FaultCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tierflow

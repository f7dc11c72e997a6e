// `tierflow train` with the gradients on the drives (--offload-gradients
// nvme) against the same run keeping them in host memory: the same losses
// and the same saved model, bit for bit, with clipping triggering and not,
// one micro-batch and several, fp16 with loss-scale skips, weights streamed
// from host and from NVMe, and through a checkpoint and a resume that
// switches the placement; the plan train records says where they went.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;
using testing_common::ReadWholeFile;
using testing_common::ScratchDir;

TrainConfig SmallRun(const std::string& dir, int steps, GradOffload where) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.steps = steps;
  c.offload = OffloadPlacement::kNvme;
  c.nvme_paths = {dir + "/nvme"};
  c.nvme_buffered = true;
  c.sub_group_size = 20000;  // many sub-groups: the spill's slots cannot keep them
  c.offload_gradients = where;
  c.checkpoint_every = 0;
  c.eval_every = 0;
  c.lr = 3e-3f;
  c.device.choice = DeviceChoice::kCpu;
  c.out_dir = dir + "/out";
  return c;
}

std::map<int64_t, double> Losses(const std::string& out) {
  std::map<int64_t, double> by_step;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) {
      by_step[j["step"].get<int64_t>()] = j["loss"].get<double>();
    }
  }
  return by_step;
}

// The plan train ran (its first metrics record) put the gradients here.
std::string PlannedWhere(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  std::getline(in, line);
  const nlohmann::json j = nlohmann::json::parse(line);
  return j.at("plan").at("placement").at("gradients").at("where").get<std::string>();
}

struct Variant {
  std::string name;
  void (*apply)(TrainConfig&);
};

class TrainGradOffload : public testing::TestWithParam<Variant> {};

TEST_P(TrainGradOffload, NvmeGradientsGiveTheHostRunsLossesAndModel) {
  const Variant& v = GetParam();
  ScratchDir host_dir("tierflow-grads-host-"), nvme_dir("tierflow-grads-nvme-");
  TrainConfig host = SmallRun(host_dir.path(), 4, GradOffload::kHost);
  TrainConfig nvme = SmallRun(nvme_dir.path(), 4, GradOffload::kNvme);
  v.apply(host);
  v.apply(nvme);
  TrainReporter quiet;
  auto a = RunTraining(host, quiet);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = RunTraining(nvme, quiet);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(PlannedWhere(host.out_dir), "host");
  EXPECT_EQ(PlannedWhere(nvme.out_dir), "nvme");
  const auto la = Losses(host.out_dir), lb = Losses(nvme.out_dir);
  ASSERT_FALSE(la.empty());
  EXPECT_EQ(la, lb);
  const std::string ma = ReadWholeFile(host.out_dir + "/model/model.safetensors");
  ASSERT_FALSE(ma.empty());
  EXPECT_TRUE(ma == ReadWholeFile(nvme.out_dir + "/model/model.safetensors"))
      << v.name << ": the saved models differ";
}

INSTANTIATE_TEST_SUITE_P(
    Variants, TrainGradOffload,
    testing::Values(
        Variant{"clipped_every_step", [](TrainConfig& c) { c.gradient_clipping = 1e-3f; }},
        Variant{"no_clipping", [](TrainConfig& c) { c.gradient_clipping = 0.0f; }},
        Variant{"accumulating",
                [](TrainConfig& c) {
                  c.grad_accum = 3;
                  c.gradient_clipping = 0.05f;
                }},
        Variant{"fp16_loss_scale_skips",
                [](TrainConfig& c) {
                  c.dtype = DType::kF16;
                  c.initial_scale_power = 20;  // overflows first: skipped steps
                  c.hysteresis = 1;
                  c.grad_accum = 2;
                  c.steps = 8;
                }},
        Variant{"weights_streamed_from_host",
                [](TrainConfig& c) {
                  c.offload_param = ParamOffload::kHost;
                  c.grad_accum = 2;
                }},
        Variant{"weights_streamed_from_nvme",
                [](TrainConfig& c) { c.offload_param = ParamOffload::kNvme; }},
        Variant{"synchronous_pipeline", [](TrainConfig& c) { c.pipeline = TrainPipeline::kSync; }}),
    [](const testing::TestParamInfo<Variant>& info) { return info.param.name; });

// A checkpoint written with the gradients in host memory resumes with them
// on the drives (and the other way): the state is the same, so the run ends
// with the uninterrupted one's model.
TEST(TrainGradOffloadResume, ResumesAcrossPlacementsToTheSameModel) {
  ScratchDir ref_dir("tierflow-grads-ref-"), dir("tierflow-grads-resume-");
  TrainReporter quiet;
  TrainConfig ref = SmallRun(ref_dir.path(), 6, GradOffload::kHost);
  ref.grad_accum = 2;
  ASSERT_TRUE(RunTraining(ref, quiet).ok());
  TrainConfig first = SmallRun(dir.path(), 3, GradOffload::kHost);
  first.grad_accum = 2;
  first.checkpoint_every = 3;
  ASSERT_TRUE(RunTraining(first, quiet).ok());
  TrainConfig second = first;
  second.steps = 6;
  second.resume = true;
  second.offload_gradients = GradOffload::kNvme;
  auto r = RunTraining(second, quiet);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(ReadWholeFile(ref.out_dir + "/model/model.safetensors") ==
              ReadWholeFile(second.out_dir + "/model/model.safetensors"));
}

}  // namespace
}  // namespace tierflow

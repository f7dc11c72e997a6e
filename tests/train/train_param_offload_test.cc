// `tierflow train` with parameter offload: the weights of units the planner
// streams (forced here with offload_param host / nvme) train the same bits
// as the all-resident run, through checkpoints and a resume; the run says
// where its weights are; DeepSpeed's offload_param.device is honoured.
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

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-train-params-") {}
};

TrainConfig SmallRun(const std::string& out, int steps, ParamOffload where) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.grad_accum = 2;
  c.steps = steps;
  c.offload = OffloadPlacement::kHost;
  c.sub_group_size = 40000;
  c.checkpoint_every = 2;
  c.eval_every = 2;
  c.eval_batches = 1;
  c.out_dir = out;
  c.device.choice = DeviceChoice::kCpu;
  c.lr = 3e-3f;
  c.offload_param = where;
  return c;
}

std::map<int64_t, double> Losses(const std::string& metrics) {
  std::map<int64_t, double> by_step;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) by_step[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return by_step;
}

struct Seen : TrainReporter {
  void OnStart(const RunInfo& i) override { info = i; }
  RunInfo info;
};

TEST(TrainParamOffload, StreamedWeightsTrainTheResidentBitsAndResume) {
  TempDir resident_dir;
  TrainReporter quiet;
  Seen resident_seen;
  auto resident = RunTraining(SmallRun(resident_dir.path(), 4, ParamOffload::kNone), resident_seen);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  EXPECT_NE(resident_seen.info.offload.find("weights all on the device"), std::string::npos)
      << resident_seen.info.offload;
  const auto reference = Losses(resident_dir.path() + "/metrics.jsonl");
  ASSERT_EQ(reference.size(), 4u);
  const std::string model_file = "/model/model.safetensors";
  const std::string reference_model =
      testing_common::ReadWholeFile(resident_dir.path() + model_file);

  for (ParamOffload where : {ParamOffload::kHost, ParamOffload::kNvme}) {
    SCOPED_TRACE(std::string(ParamOffloadName(where)));
    // Straight through.
    TempDir straight;
    Seen seen;
    auto a = RunTraining(SmallRun(straight.path(), 4, where), seen);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_NE(seen.info.offload.find(where == ParamOffload::kHost ? "streamed from host RAM"
                                                                  : "streamed from NVMe"),
              std::string::npos)
        << seen.info.offload;
    EXPECT_EQ(Losses(straight.path() + "/metrics.jsonl"), reference);
    EXPECT_EQ(testing_common::ReadWholeFile(straight.path() + model_file), reference_model);
    // Two steps, then a resume from the checkpoint for the other two.
    TempDir resumed;
    ASSERT_TRUE(RunTraining(SmallRun(resumed.path(), 2, where), quiet).ok());
    TrainConfig rest = SmallRun(resumed.path(), 4, where);
    rest.resume = true;
    auto b = RunTraining(rest, quiet);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(Losses(resumed.path() + "/metrics.jsonl"), reference);
    EXPECT_EQ(testing_common::ReadWholeFile(resumed.path() + model_file), reference_model);
  }
}

TEST(TrainParamOffload, DeepSpeedsOffloadParamDeviceIsHonoured) {
  auto parse = [](const std::string& text) {
    return ParseTrainConfig(text, "ds.json", TrainConfig());
  };
  auto cpu = parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
                       "pin_memory": true}}})");
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->offload_param, ParamOffload::kHost);
  auto nvme = parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                        "nvme_path": "/mnt/nvme0"}}})");
  ASSERT_TRUE(nvme.ok()) << nvme.status().ToString();
  EXPECT_EQ(nvme->offload_param, ParamOffload::kNvme);
  EXPECT_EQ(nvme->nvme_paths, std::vector<std::string>{"/mnt/nvme0"});
  auto none = parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "none"}}})");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->offload_param, ParamOffload::kNone);
  // A key that has no counterpart says so instead of passing silently.
  auto sized = parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
                         "buffer_count": 5}}})");
  ASSERT_TRUE(sized.ok());
  bool warned = false;
  for (const std::string& w : sized->warnings) {
    warned = warned || w.find("offload_param.buffer_count") != std::string::npos;
  }
  EXPECT_TRUE(warned);
  auto bad = parse(R"({"zero_optimization": {"offload_param": {"device": "tape"}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("offload_param.device"), std::string::npos)
      << bad.status().ToString();
  // tierflow's own keys, and the slots bound.
  auto own = parse(R"({"tierflow": {"offload_param": "host", "param_slots": 4}})");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->offload_param, ParamOffload::kHost);
  EXPECT_EQ(own->param_slots, 4);
  EXPECT_FALSE(parse(R"({"tierflow": {"param_slots": 1}})").ok());
}

}  // namespace
}  // namespace tierflow

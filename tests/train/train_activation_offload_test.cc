// `tierflow train` with the activation checkpoints in pinned host memory
// (--offload-activations host) against the same run keeping them on the
// device: the same losses and the same saved model, bit for bit, with
// accumulation, through a checkpoint and a resume, for a Llama and a Qwen2
// (q/k/v biases, tied head) shape; the plan train records says where they
// went; and a run that asks for the offload without checkpointing is refused.
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

// A Qwen2-shaped model: six blocks (four residuals leave the device),
// q/k/v biases, a tied head, byte vocabulary for the bundled text.
std::string Qwen2Config(const fs::path& dir) {
  fs::create_directories(dir);
  const nlohmann::json config = {{"architectures", {"Qwen2ForCausalLM"}},
                                 {"model_type", "qwen2"},
                                 {"vocab_size", 256},
                                 {"hidden_size", 32},
                                 {"intermediate_size", 64},
                                 {"num_hidden_layers", 6},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", 2},
                                 {"max_position_embeddings", 128},
                                 {"rms_norm_eps", 1e-6},
                                 {"rope_theta", 1000000.0},
                                 {"tie_word_embeddings", true},
                                 {"torch_dtype", "bfloat16"}};
  std::ofstream(dir / "config.json") << config.dump(2);
  return (dir / "config.json").string();
}

TrainConfig SmallRun(const std::string& model, const std::string& out, int steps,
                     ActivationOffload where) {
  TrainConfig c;
  c.model = model;
  c.micro_batch = 2;
  c.seq_len = 32;
  c.grad_accum = 2;
  c.steps = steps;
  c.activation_checkpointing = true;
  c.offload_activations = where;
  c.offload = OffloadPlacement::kHost;
  c.checkpoint_every = 2;
  c.eval_every = 2;
  c.eval_batches = 1;
  c.lr = 3e-3f;
  c.device.choice = DeviceChoice::kCpu;
  c.out_dir = out;
  return c;
}

std::map<int64_t, double> Losses(const std::string& out) {
  std::map<int64_t, double> by_step;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) by_step[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return by_step;
}

// Where the plan train ran (its first metrics record) put the checkpoints.
std::string PlannedWhere(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  std::string first;
  std::getline(in, first);
  return nlohmann::json::parse(first)["plan"]["placement"]["activations"]["where"];
}

class TrainActivationOffload : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainActivationOffload, SameBitsAsCheckpointsOnTheDeviceThroughAResume) {
  ScratchDir dir("tierflow-train-act-");
  const std::string model = GetParam() == "qwen2" ? Qwen2Config(dir / "qwen2") : GetParam();
  TrainReporter quiet;
  const std::string kept = dir / "kept";
  auto a = RunTraining(SmallRun(model, kept, 4, ActivationOffload::kNone), quiet);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(PlannedWhere(kept), "none");
  const auto reference = Losses(kept);
  ASSERT_EQ(reference.size(), 4u);
  const std::string model_file = "/model/model.safetensors";
  const std::string reference_model = ReadWholeFile(kept + model_file);

  const std::string moved = dir / "moved";
  auto b = RunTraining(SmallRun(model, moved, 4, ActivationOffload::kHost), quiet);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(PlannedWhere(moved), "host");
  EXPECT_EQ(Losses(moved), reference);
  EXPECT_EQ(ReadWholeFile(moved + model_file), reference_model);

  // Two steps kept on the device, the other two resumed with the offload.
  const std::string resumed = dir / "resumed";
  ASSERT_TRUE(RunTraining(SmallRun(model, resumed, 2, ActivationOffload::kNone), quiet).ok());
  TrainConfig rest = SmallRun(model, resumed, 4, ActivationOffload::kHost);
  rest.resume = true;
  auto c = RunTraining(rest, quiet);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(Losses(resumed), reference);
  EXPECT_EQ(ReadWholeFile(resumed + model_file), reference_model);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TrainActivationOffload, ::testing::Values("small-llama", "qwen2"));

// With the MLP in row tiles as well (two tiles of 256 of the 512 rows), and
// the offload: still the bits of the plain run.
TEST(TrainActivationOffloadTiles, TiledMlpAndOffloadedCheckpointsAreThePlainRunsBits) {
  ScratchDir dir("tierflow-train-tiles-");
  TrainReporter quiet;
  auto config = [&](const std::string& out, ActivationOffload where, uint64_t tile) {
    TrainConfig c = SmallRun("small-llama", out, 2, where);
    c.seq_len = 256;
    c.grad_accum = 1;
    c.mlp_tile_rows = tile;
    return c;
  };
  const std::string plain = dir / "plain", tiled = dir / "tiled";
  auto a = RunTraining(config(plain, ActivationOffload::kNone, 0), quiet);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = RunTraining(config(tiled, ActivationOffload::kHost, 256), quiet);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::ifstream in(tiled + "/metrics.jsonl");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(nlohmann::json::parse(first)["plan"]["placement"]["activations"]["mlp_tile_rows"], 256);
  EXPECT_EQ(Losses(plain), Losses(tiled));
  EXPECT_EQ(Losses(tiled).size(), 2u);
  EXPECT_EQ(ReadWholeFile(plain + "/model/model.safetensors"),
            ReadWholeFile(tiled + "/model/model.safetensors"));
}

TEST(TrainActivationOffloadRefusal, HostWithoutCheckpointingIsRefusedBeforeAnyStep) {
  ScratchDir dir("tierflow-train-act-refused-");
  TrainConfig c = SmallRun("tiny-llama", dir / "out", 2, ActivationOffload::kHost);
  c.activation_checkpointing = false;
  TrainReporter quiet;
  auto r = RunTraining(c, quiet);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--activation-checkpointing"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(fs::exists(fs::path(dir / "out") / "metrics.jsonl"));
}

}  // namespace
}  // namespace tierflow

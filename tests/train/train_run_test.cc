// The training loop end to end on the CPU device: resume is bit-exact,
// checkpoints verify and are never lost to a failed save, bad inputs give
// clear errors that leave earlier checkpoints intact.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"
#include <nlohmann/json.hpp>

#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-train-") {}
};

TrainConfig SmallRun(const std::string& out) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.grad_accum = 2;
  c.steps = 8;
  c.offload = "nvme";
  c.sub_group_size = 40000;  // several sub-groups per unit
  c.checkpoint_every = 4;
  c.eval_every = 4;
  c.eval_batches = 1;
  c.out_dir = out;
  c.device = "cpu";
  c.lr = 3e-3f;
  return c;
}

std::map<int64_t, nlohmann::json> ReadMetrics(const std::string& path) {
  std::map<int64_t, nlohmann::json> by_step;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    by_step[j["step"].get<int64_t>()] = j;  // the last record of a step wins
  }
  return by_step;
}

std::string ReadFile(const std::string& path) { return testing_common::ReadWholeFile(path); }

TEST(TrainRun, ResumeIsBitExact) {
  TempDir straight, resumed;
  TrainReporter quiet;
  auto a = RunTraining(SmallRun(straight.path()), quiet);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_LT(a->last_loss, a->first_loss);

  // The same run, stopped after step 4 (a checkpoint), then resumed.
  TrainConfig first_half = SmallRun(resumed.path());
  first_half.steps = 4;
  auto b1 = RunTraining(first_half, quiet);
  ASSERT_TRUE(b1.ok()) << b1.status().ToString();
  TrainConfig second_half = SmallRun(resumed.path());
  second_half.resume = true;
  auto b2 = RunTraining(second_half, quiet);
  ASSERT_TRUE(b2.ok()) << b2.status().ToString();

  auto ma = ReadMetrics(straight / "metrics.jsonl"), mb = ReadMetrics(resumed / "metrics.jsonl");
  ASSERT_EQ(ma.size(), 8u);
  ASSERT_EQ(mb.size(), 8u);
  for (int64_t s = 1; s <= 8; ++s) {
    EXPECT_EQ(ma[s]["loss"].get<double>(), mb[s]["loss"].get<double>()) << "step " << s;
    EXPECT_EQ(ma[s]["grad_norm"], mb[s]["grad_norm"]) << "step " << s;
  }
  EXPECT_EQ(ReadFile(straight / "model/model.safetensors"), ReadFile(resumed / "model/model.safetensors"));
}

TEST(TrainRun, CheckpointsVerifyAndCorruptionIsDetected) {
  TempDir out;
  TrainReporter quiet;
  ASSERT_TRUE(RunTraining(SmallRun(out.path()), quiet).ok());
  auto list = ListCheckpoints(out.path());
  ASSERT_EQ(list.size(), 2u);  // steps 8 and 4 (keep = 2)
  EXPECT_EQ(list[0].step, 8);
  EXPECT_TRUE(list[0].verified) << list[0].problem;
  // Flip a byte of an optimizer file of the newest checkpoint.
  std::string victim;
  for (const auto& e : fs::directory_iterator(list[0].path + "/optimizer")) victim = e.path();
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(200);
    f.write(&c, 1);
  }
  CheckpointInfo bad = VerifyCheckpoint(list[0].path);
  EXPECT_FALSE(bad.verified);
  EXPECT_NE(bad.problem.find(victim), std::string::npos) << bad.problem;
  EXPECT_NE(bad.problem.find("CRC32C"), std::string::npos) << bad.problem;

  // Resume skips it and continues from the older one (step 4), saying why.
  class Notes : public TrainReporter {
   public:
    void OnNote(const std::string& m) override { notes += m + "\n"; }
    void OnStart(const RunInfo& i) override { start = i.start_step; }
    std::string notes;
    int64_t start = -1;
  } notes;
  TrainConfig again = SmallRun(out.path());
  again.resume = true;
  again.steps = 6;
  auto r = RunTraining(again, notes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(notes.start, 4);
  EXPECT_NE(notes.notes.find("CRC32C"), std::string::npos) << notes.notes;
}

TEST(TrainRun, ResumeWithoutCheckpointStartsFreshAndSaysSo) {
  TempDir out;
  class Notes : public TrainReporter {
   public:
    void OnNote(const std::string& m) override { notes += m; }
    std::string notes;
  } notes;
  TrainConfig c = SmallRun(out.path());
  c.steps = 1;
  c.resume = true;
  ASSERT_TRUE(RunTraining(c, notes).ok());
  EXPECT_NE(notes.notes.find("starting from the beginning"), std::string::npos) << notes.notes;
}

TEST(TrainRun, BadInputsAreClearErrorsAndKeepEarlierCheckpoints) {
  TempDir out;
  TrainReporter quiet;
  TrainConfig c = SmallRun(out.path());
  c.steps = 4;
  ASSERT_TRUE(RunTraining(c, quiet).ok());
  const std::string before = ReadFile(ListCheckpoints(out.path())[0].path + "/trainer_state.json");

  struct Case {
    std::string name;
    std::function<void(TrainConfig&)> mutate;
    std::string expect;  // in the message
  };
  const std::string empty_file = out / "empty.txt";
  std::ofstream(empty_file).close();
  const std::string bad_tokens = out / "bad.bin";
  {
    std::ofstream f(bad_tokens, std::ios::binary);
    uint16_t ids[600];
    for (int i = 0; i < 600; ++i) ids[i] = static_cast<uint16_t>(i % 300);  // 256+ > vocab
    f.write(reinterpret_cast<const char*>(ids), sizeof(ids));
  }
  std::vector<Case> cases = {
      {"missing data", [&](TrainConfig& t) { t.data = out / "nope.txt"; }, "nope.txt"},
      {"empty data", [&](TrainConfig& t) { t.data = empty_file; }, "empty.txt"},
      {"token id beyond vocab", [&](TrainConfig& t) { t.data = bad_tokens; t.token_dtype = "u16"; }, "bad.bin"},
      {"unknown model", [&](TrainConfig& t) { t.model = "llama-9000"; }, "llama-9000"},
      {"sequence too long", [&](TrainConfig& t) { t.seq_len = 100000; }, "seq"},
      {"zero micro-batch", [&](TrainConfig& t) { t.micro_batch = 0; }, "micro"},
      {"device memory too small", [&](TrainConfig& t) { t.device_memory = "64KiB"; }, "device"},
  };
  for (const Case& k : cases) {
    TrainConfig t = SmallRun(out.path());
    t.steps = 6;
    t.resume = true;
    k.mutate(t);
    auto r = RunTraining(t, quiet);
    ASSERT_FALSE(r.ok()) << k.name;
    std::string msg = r.status().message();
    for (char& ch : msg) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_NE(msg.find(k.expect), std::string::npos) << k.name << ": " << r.status().ToString();
    // The earlier checkpoint is untouched.
    auto list = ListCheckpoints(out.path());
    ASSERT_FALSE(list.empty()) << k.name;
    EXPECT_TRUE(list[0].verified) << k.name;
    EXPECT_EQ(ReadFile(list[0].path + "/trainer_state.json"), before) << k.name;
  }
}

}  // namespace
}  // namespace tierflow

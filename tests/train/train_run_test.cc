// The training loop end to end on the CPU device: resume is bit-exact,
// checkpoints verify and are never lost to a failed save, bad inputs give
// clear errors that leave earlier checkpoints intact.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "tests/common/scratch_dir.h"

#include "io/file_system.h"
#include "io/hf_checkpoint.h"
#include "model/hf_model.h"
#include "model/param_layout.h"
#include "model/transformer.h"
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
  c.offload = OffloadPlacement::kNvme;
  c.sub_group_size = 40000;  // several sub-groups per unit
  c.checkpoint_every = 4;
  c.eval_every = 4;
  c.eval_batches = 1;
  c.out_dir = out;
  c.device.choice = DeviceChoice::kCpu;
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

// final_save: what the end of the run writes ("all" is the default; a stop
// request's checkpoint is kept whatever it says, see crash_test).
TEST(TrainRun, FinalSaveDecidesWhatTheEndOfTheRunWrites) {
  for (const std::string what : {"all", "model", "none"}) {
    TempDir out;
    TrainConfig c = SmallRun(out.path());
    c.steps = 3;
    c.checkpoint_every = 0;
    const StatusOr<FinalSave> named = ParseChoice<FinalSave>(what);
    ASSERT_TRUE(named.ok()) << what;
    c.final_save = *named;
    TrainReporter quiet;
    auto r = RunTraining(c, quiet);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().ToString();
    EXPECT_EQ(r->steps_done, 3);
    EXPECT_EQ(fs::exists(out / "checkpoints/step-00000003"), what == "all") << what;
    EXPECT_EQ(fs::exists(out / "model/model.safetensors"), what != "none") << what;
    EXPECT_EQ(r->final_model_dir.empty(), what == "none") << what;
    EXPECT_EQ(ReadMetrics(out / "metrics.jsonl").size(), 3u) << what;
  }
}

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
    EXPECT_GE(ma[s]["device_peak_bytes"].get<uint64_t>(), ma[s]["device_bytes"].get<uint64_t>());
  }
  // Each run's first record carries what the plan counted on the device,
  // for comparison with the measured peak (scripts/gpu-check.sh reads both).
  EXPECT_GT(ma[1]["plan_device_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(ma[2].contains("plan_device_bytes"));
  EXPECT_TRUE(mb[5].contains("plan_device_bytes"));  // the resumed run's first
  EXPECT_EQ(ReadFile(straight / "model/model.safetensors"),
            ReadFile(resumed / "model/model.safetensors"));
}

// Buckets of the model's largest tensor: blocks stream in pieces (the byte
// vocabulary is smaller than that tensor, so the embedding and head go
// whole; vocabulary slices are tested with the model and the engine), every
// checkpoint streams; a resume is still bit-exact, and the run says how its
// gradients go.
TEST(TrainRun, ResumeIsBitExactWithGradientsInPieces) {
  TempDir straight, resumed;
  TrainReporter quiet;
  auto config = [](const std::string& out, int steps) {
    TrainConfig c = SmallRun(out);
    c.offload = OffloadPlacement::kHost;
    c.steps = steps;
    c.checkpoint_every = 2;
    c.grad_bucket_params = 352 * 128;  // tiny-llama's largest tensor: an MLP's (352, 128)
    return c;
  };
  struct Seen : TrainReporter {
    void OnStart(const RunInfo& i) override { info = i; }
    RunInfo info;
  } seen;
  auto a = RunTraining(config(straight.path(), 4), seen);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_NE(seen.info.offload.find("3 gradient buckets of 45.1 K params"), std::string::npos)
      << seen.info.offload;
  ASSERT_TRUE(RunTraining(config(resumed.path(), 2), quiet).ok());
  TrainConfig rest = config(resumed.path(), 4);
  rest.resume = true;
  auto b = RunTraining(rest, quiet);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto ma = ReadMetrics(straight / "metrics.jsonl"), mb = ReadMetrics(resumed / "metrics.jsonl");
  ASSERT_EQ(ma.size(), 4u);
  ASSERT_EQ(mb.size(), 4u);
  for (int64_t s = 1; s <= 4; ++s) {
    EXPECT_EQ(ma[s]["loss"].get<double>(), mb[s]["loss"].get<double>()) << "step " << s;
  }
  EXPECT_EQ(ReadFile(straight / "model/model.safetensors"),
            ReadFile(resumed / "model/model.safetensors"));

  // Below the largest tensor: refused before anything runs, naming it.
  TempDir small;
  TrainConfig too_small = config(small.path(), 1);
  too_small.grad_bucket_params = 352 * 128 - 1;
  auto refused = RunTraining(too_small, quiet);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("smaller than the largest gradient"), std::string::npos)
      << refused.status().ToString();
}

// DeepSpeed's sub-group rule (whole tensors; here one tensor each, then one
// unit each) cuts the optimizer's work differently, not its result: the
// weights are those of tierflow's slices bit for bit, and a checkpoint
// written under one rule resumes under another. The run names its rule.
TEST(TrainRun, DeepSpeedsSubGroupRuleTrainsTheSameBitsAndResumesAcrossRules) {
  TempDir slices, whole;
  TrainReporter quiet;
  TrainConfig a = SmallRun(slices.path());
  a.steps = 4;
  ASSERT_TRUE(RunTraining(a, quiet).ok());
  struct Seen : TrainReporter {
    void OnStart(const RunInfo& i) override { info = i; }
    RunInfo info;
  } seen;
  TrainConfig b = SmallRun(whole.path());
  b.steps = 2;
  b.checkpoint_every = 2;
  b.sub_group_cut = SubGroupCut::kWholeTensors;
  b.sub_group_size = 0;
  auto first = RunTraining(b, seen);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_NE(seen.info.offload.find("one tensor each"), std::string::npos) << seen.info.offload;
  b.steps = 4;
  b.resume = true;
  b.sub_group_size = 1000000000000;  // every unit one sub-group
  auto second = RunTraining(b, seen);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(seen.info.offload.find("whole tensors, at least"), std::string::npos)
      << seen.info.offload;
  EXPECT_EQ(ReadFile(slices / "model/model.safetensors"),
            ReadFile(whole / "model/model.safetensors"));
}

// DeepSpeed's bias_correction: false takes effect. At step 1 Adam without
// correction moves each weight by lr (1 - beta1) / sqrt(1 - beta2) =
// 3.1623 lr (with eps negligible), with it by lr: so the loss after one step without
// correction equals the corrected one's at 3.1623 times the rate, and
// differs from the corrected one's at the same rate.
TEST(TrainRun, BiasCorrectionOffTakesEffect) {
  TrainReporter quiet;
  auto loss_after_one_step = [&](bool correction, float lr) {
    TempDir dir;
    TrainConfig c = SmallRun(dir.path());
    c.offload = OffloadPlacement::kHost;
    c.steps = 2;
    c.eval_every = 0;
    c.dtype = DType::kF32;
    c.bias_correction = correction;
    c.lr = lr;
    c.eps = 1e-30f;  // so that small gradients move by the same rule too
    auto r = RunTraining(c, quiet);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return ReadMetrics(dir / "metrics.jsonl")[2]["loss"].get<double>();
  };
  const float lr = 1e-3f;
  const double off = loss_after_one_step(false, lr);
  const double on_scaled = loss_after_one_step(true, lr * 0.1f / std::sqrt(0.001f));
  const double on = loss_after_one_step(true, lr);
  // One step moves the loss by about 1e-3 here: the rate's effect must show,
  // and the uncorrected run must sit on the scaled one, far closer than that.
  EXPECT_GT(std::fabs(off - on), 1e-4 * std::fabs(on)) << off << " vs " << on;
  EXPECT_LT(std::fabs(off - on_scaled), 0.02 * std::fabs(off - on))
      << off << " vs " << on_scaled << " (scaled) and " << on;
}

// A model fine-tuned from a Hugging Face directory is a drop-in replacement
// for it: config.json is the source's (keys tierflow does not model, Llama
// 3's token ids) with only torch_dtype set, and the tokenizer, generation
// and chat-template files come along, into the final model and into each
// checkpoint's model (listed, checksummed, verified).
TEST(TrainRun, TheSavedModelKeepsTheSourcesConfigAndTokenizerFiles) {
  TempDir first, second;
  TrainReporter quiet;
  TrainConfig base = SmallRun(first.path());
  base.offload = OffloadPlacement::kHost;
  base.steps = 1;
  ASSERT_TRUE(RunTraining(base, quiet).ok());
  const std::string source = first / "model";
  auto config = nlohmann::json::parse(ReadFile(source + "/config.json"));
  config["bos_token_id"] = 128000;
  config["eos_token_id"] = {128001, 128009};
  config["x_not_modelled"] = {{"kept", true}};
  std::ofstream(source + "/config.json") << config.dump(2);
  const std::map<std::string, std::string> side = {
      {"tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}"},
      {"tokenizer_config.json", "{\"bos_token\": \"<|begin_of_text|>\"}"},
      {"generation_config.json", "{\"temperature\": 0.6, \"top_p\": 0.9}"},
      {"chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}"}};
  for (const auto& [name, text] : side) std::ofstream(source + "/" + name) << text;

  TrainConfig tune = SmallRun(second.path());
  tune.model = source;
  tune.tokenizer = "byte";  // the fake tokenizer.json is only carried, never read
  tune.offload = OffloadPlacement::kHost;
  tune.steps = 2;
  tune.checkpoint_every = 2;
  auto r = RunTraining(tune, quiet);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto list = ListCheckpoints(second.path());
  ASSERT_FALSE(list.empty());
  EXPECT_TRUE(list[0].verified) << list[0].problem;
  for (const std::string& dir : {second / "model", list[0].path + "/model"}) {
    auto saved = nlohmann::json::parse(ReadFile(dir + "/config.json"));
    auto expected = config;
    expected["torch_dtype"] = saved["torch_dtype"];
    EXPECT_EQ(saved, expected) << dir;
    for (const auto& [name, text] : side)
      EXPECT_EQ(ReadFile(dir + "/" + name), text) << dir << name;
  }
}

// A model fine-tuned from a sharded bf16 source, training in fp32 at a
// learning rate too small to move any weight, is saved as the source was:
// the same shard files, tensor names, dtypes, shapes and bytes, and the same
// config.json.
TEST(TrainRun, TheSavedModelIsStoredAsTheSourceWas) {
  TempDir dir;
  const std::string source = dir / "source";
  {
    auto preset = ResolveTrainableModel("tiny-llama");
    ASSERT_TRUE(preset.ok());
    auto device = CreateDevice({.kind = DeviceChoice::kCpu, .memory_capacity_bytes = 256u << 20});
    ASSERT_TRUE(device.ok());
    auto model = TransformerModel::Create(**device, preset->config,
                                          {.batch = 1, .seq_len = 8, .dtype = DType::kF32});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<float> weights((*model)->layout().total_params);
    for (size_t u = 0; u < (*model)->layout().units.size(); ++u) {
      ASSERT_TRUE((*model)
                      ->InitialWeights(static_cast<int>(u),
                                       weights.data() + (*model)->layout().unit_offsets[u])
                      .ok());
    }
    // A weight of exactly 0 would move by the learning rate (1e-30 is a bf16
    // value); every other weight is far too large to.
    for (float& w : weights) w = w == 0.0f ? 0.01f : w;
    HfModelSaveOptions save;
    save.dtype = DType::kBF16;
    save.max_shard_bytes = 300'000;  // several shards
    ASSERT_TRUE(SaveHfModel(source, (*model)->layout(), weights.data(), save).ok());
  }
  auto before = HfCheckpoint::Open(source);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_TRUE(before->sharded());
  ASSERT_GE(before->files().size(), 3u);

  TrainConfig tune = SmallRun(dir / "out");
  tune.model = source;
  tune.tokenizer = "byte";
  tune.dtype = DType::kF32;
  tune.lr = 1e-30f;
  tune.steps = 1;
  tune.offload = OffloadPlacement::kHost;
  TrainReporter quiet;
  auto r = RunTraining(tune, quiet);
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  const std::string saved = dir / "out/model";
  auto after = HfCheckpoint::Open(saved);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_EQ(after->files().size(), before->files().size());
  for (size_t f = 0; f < before->files().size(); ++f) {
    EXPECT_EQ(fs::path(after->files()[f]->path()).filename(),
              fs::path(before->files()[f]->path()).filename());
  }
  EXPECT_EQ(after->TensorNames(), before->TensorNames());
  for (const std::string& name : before->TensorNames()) {
    const auto a = before->Find(name), b = after->Find(name);
    ASSERT_NE(b.tensor, nullptr) << name;
    EXPECT_EQ(b.tensor->dtype_name, "BF16") << name;
    EXPECT_EQ(b.tensor->shape, a.tensor->shape) << name;
    std::string x(a.tensor->num_bytes(), '\0'), y(b.tensor->num_bytes(), '\0');
    ASSERT_TRUE(a.file->ReadRaw(*a.tensor, x.data(), x.size()).ok());
    ASSERT_TRUE(b.file->ReadRaw(*b.tensor, y.data(), y.size()).ok());
    EXPECT_TRUE(x == y) << name;
  }
  EXPECT_EQ(nlohmann::json::parse(ReadFile(saved + "/config.json")),
            nlohmann::json::parse(ReadFile(source + "/config.json")));
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

  EXPECT_FALSE(bad.environmental()) << "a checksum mismatch is the checkpoint's own damage";
  EXPECT_EQ(bad.problem_code, StatusCode::kDataLoss);
}

// --resume used to skip a newest checkpoint that did not verify and go on
// from an older one, after which retention deleted the newer one: state lost
// without anyone deciding it. Now --resume stops and says what to do, and
// --resume-from takes the older one when the user names it.
TEST(TrainRun, ResumeRefusesToFallBackPastNewerCheckpoint) {
  TempDir out;
  TrainReporter quiet;
  ASSERT_TRUE(RunTraining(SmallRun(out.path()), quiet).ok());
  auto list = ListCheckpoints(out.path());
  ASSERT_EQ(list.size(), 2u);
  std::string victim;
  for (const auto& e : fs::directory_iterator(list[0].path + "/optimizer")) victim = e.path();
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  const std::string newest_state = ReadFile(list[0].path + "/trainer_state.json");

  class Notes : public TrainReporter {
   public:
    void OnNote(const std::string& m) override { notes += m + "\n"; }
    void OnStart(const RunInfo& i) override { start = i.start_step; }
    std::string notes;
    int64_t start = -1;
  };
  Notes refused;
  TrainConfig again = SmallRun(out.path());
  again.resume = true;
  again.steps = 10;
  auto r = RunTraining(again, refused);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find(list[0].path), std::string::npos) << msg;     // which one
  EXPECT_NE(msg.find("CRC32C"), std::string::npos) << msg;         // why
  EXPECT_NE(msg.find("--resume-from"), std::string::npos) << msg;  // what to do
  EXPECT_NE(msg.find(list[1].path), std::string::npos) << msg;     // the one that would do
  EXPECT_EQ(refused.start, -1) << "nothing started";
  EXPECT_EQ(ReadFile(list[0].path + "/trainer_state.json"), newest_state);

  // Named explicitly, the older one is taken.
  Notes taken;
  again.resume = false;
  again.resume_from = list[1].path;
  r = RunTraining(again, taken);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(taken.start, 4);
}

// Two runs on one --out used to corrupt each other (swept temporaries, a
// truncated metrics.jsonl, lost swap_runs.json entries). The second is now
// refused before it touches anything, naming the directory and the holder.
TEST(TrainRun, SecondRunOnSameOutIsRefusedWithHolderPid) {
  TempDir out;
  // The second run starts while the first is between steps.
  class StartsAnother : public TrainReporter {
   public:
    explicit StartsAnother(TrainConfig second) : second_(std::move(second)) {}
    void OnStep(const StepReport& r) override {
      if (r.step != 2) return;
      TrainReporter quiet;
      second_result = RunTraining(second_, quiet).status();
    }
    Status second_result = InternalError("the second run never started");

   private:
    TrainConfig second_;
  };
  TrainConfig first = SmallRun(out.path());
  TrainConfig second = SmallRun(out.path());
  second.steps = 1;
  StartsAnother reporter(second);
  auto r = RunTraining(first, reporter);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Status& refused = reporter.second_result;
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find(out.path()), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("pid " + std::to_string(::getpid())), std::string::npos)
      << refused.message();
  // The first run's outputs are whole: every step's metrics line, its checkpoints.
  EXPECT_EQ(ReadMetrics(out / "metrics.jsonl").size(), 8u);
  auto list = ListCheckpoints(out.path());
  ASSERT_EQ(list.size(), 2u);
  for (const CheckpointInfo& c : list) EXPECT_TRUE(c.verified) << c.problem;

  // A lock file left behind (the run is over, or was killed) does not block the next run.
  ASSERT_TRUE(fs::exists(out / ".tierflow.lock"));
  TrainReporter quiet;
  EXPECT_TRUE(RunTraining(second, quiet).ok());
}

// Records the final model's renames and directory fsyncs, passing them on.
class RecordingFileSystem : public FileSystem {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return DefaultFileSystem()->NewWritableFile(path);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    ops.push_back("rename " + from + " -> " + to);
    return DefaultFileSystem()->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override {
    return DefaultFileSystem()->RemoveFile(path);
  }
  Status SyncDirectory(const std::string& dir) override {
    ops.push_back("sync " + dir);
    return DefaultFileSystem()->SyncDirectory(dir);
  }
  std::vector<std::string> ops;
};

// The final model's rename was not followed by an fsync of OUT (a power cut
// could lose it), and the temporaries of a save interrupted by a crash were
// never removed.
TEST(TrainRun, FinalModelRenameIsDurableAndLeftoversAreRemoved) {
  TempDir out;
  for (const char* leftover : {".model.tmp-999999", ".model.old-999999"}) {
    fs::create_directories(out / leftover);
    std::ofstream(fs::path(out / leftover) / "model.safetensors") << "partial";
  }
  TrainConfig c = SmallRun(out.path());
  c.steps = 2;
  c.checkpoint_every = 0;
  RecordingFileSystem recording;
  TrainHooks hooks;
  hooks.file_system = &recording;
  TrainReporter quiet;
  // Twice: the second save replaces a model that is already there.
  for (int run = 0; run < 2; ++run) {
    recording.ops.clear();
    auto r = RunTraining(c, quiet, nullptr, &hooks);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const std::string into_place =
        "rename " + (out / ".model.tmp-") + std::to_string(::getpid()) + " -> " + (out / "model");
    auto renamed = std::find(recording.ops.begin(), recording.ops.end(), into_place);
    ASSERT_NE(renamed, recording.ops.end()) << testing::PrintToString(recording.ops);
    EXPECT_NE(std::find(renamed, recording.ops.end(), "sync " + out.path()), recording.ops.end())
        << "no fsync of " << out.path()
        << " after the rename: " << testing::PrintToString(recording.ops);
    for (const auto& e : fs::directory_iterator(out.path())) {
      EXPECT_NE(e.path().filename().string().rfind(".model.", 0), 0u)
          << "left behind: " << e.path();
    }
    EXPECT_TRUE(fs::exists(out / "model/model.safetensors"));
  }
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

// grad_transfer_dtype and speculation_params reach the engine: the run
// reports them, and the pinned memory of its first step is what they size
// (gradient staging at 2 or 4 B/param of the largest unit, 3 buckets; the
// speculated parameters' new weights at 2 B/param).
TEST(TrainRun, GradTransferDtypeAndSpeculationBudgetTakeEffect) {
  struct Seen : public TrainReporter {
    void OnStart(const RunInfo& i) override { info = i; }
    void OnStep(const StepReport& r) override {
      if (r.step == 1) pinned = r.pinned_bytes;
    }
    RunInfo info;
    uint64_t pinned = 0;
  };
  auto run = [](const std::function<void(TrainConfig&)>& edit) {
    TempDir out;
    TrainConfig c = SmallRun(out.path());
    c.steps = 1;
    c.offload = OffloadPlacement::kHost;
    c.checkpoint_every = 0;
    c.eval_every = 0;
    edit(c);
    Seen seen;
    auto r = RunTraining(c, seen);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return seen;
  };
  const int64_t params = 803968;               // tiny-llama
  const uint64_t largest_unit = 184576;        // a block
  const Seen base = run([](TrainConfig&) {});  // bf16 weights: the defaults
  EXPECT_EQ(base.info.grad_transfer_dtype, DType::kBF16);
  EXPECT_EQ(base.info.speculation_from, "free host memory");
  EXPECT_EQ(base.info.speculation_params, params);  // a tiny model fits whole

  const Seen fp32 = run([](TrainConfig& c) { c.grad_transfer_dtype = DType::kF32; });
  EXPECT_EQ(fp32.info.grad_transfer_dtype, DType::kF32);
  EXPECT_EQ(fp32.pinned, base.pinned + 3 * largest_unit * (4 - 2));

  const Seen budget = run([](TrainConfig& c) { c.speculation_params = 100000; });
  EXPECT_EQ(budget.info.speculation_from, "input");
  EXPECT_EQ(budget.info.speculation_params, 100000);
  EXPECT_EQ(budget.pinned, base.pinned - (params - 100000) * 2);
}

// With no placement given, train runs the planner's: host RAM when the
// state fits there, NVMe (in part or whole) when the host is too small; and
// a placement given in the configuration (here a forced split) runs as given.
// Each says where the state went and who chose it.
TEST(TrainRun, PlacementComesFromThePlannerUnlessGiven) {
  struct Seen : public TrainReporter {
    void OnStart(const RunInfo& i) override { info = i; }
    void OnStep(const StepReport& r) override { losses.push_back(r.stats.loss); }
    RunInfo info;
    std::vector<float> losses;
  };
  auto run = [](const std::function<void(TrainConfig&)>& edit, uint64_t host_memory) {
    TempDir out;
    TrainConfig c = SmallRun(out.path());
    c.offload = TrainConfig().offload;  // the default
    c.steps = 2;
    c.checkpoint_every = 0;
    c.eval_every = 0;
    edit(c);
    TrainHooks hooks;
    hooks.host_memory_bytes = host_memory;
    Seen seen;
    auto r = RunTraining(c, seen, nullptr, &hooks);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return seen;
  };
  EXPECT_EQ(TrainConfig().offload, OffloadPlacement::kAuto);
  const std::string planner = "chosen by the planner";

  const Seen roomy = run([](TrainConfig&) {}, 0);
  EXPECT_EQ(roomy.info.offload.rfind("host RAM; 22 sub-groups, slices of at most 40000 "
                                     "parameters; 3 gradient buckets of ",
                                     0),
            0u)
      << roomy.info.offload;
  EXPECT_EQ(roomy.info.offload_from.rfind(planner, 0), 0u) << roomy.info.offload_from;
  EXPECT_TRUE(roomy.info.nvme_dir.empty());

  // The planner keeps its placements within 85% of the host
  // (kHostAutoPlacementFraction), and counts 1 GiB of process overhead
  // besides tiny-llama's 9 MiB of state: 1.13 GiB cannot hold all of it.
  const uint64_t tight = (uint64_t{1} << 30) / 9 * 10 + (uint64_t{15} << 20);
  const Seen cramped = run([](TrainConfig&) {}, tight);
  EXPECT_NE(cramped.info.offload.rfind("host RAM", 0), 0u) << cramped.info.offload;
  EXPECT_EQ(cramped.info.offload_from.rfind(planner, 0), 0u) << cramped.info.offload_from;
  EXPECT_FALSE(cramped.info.nvme_dir.empty());

  const Seen split = run(
      [](TrainConfig& c) {
        c.offload = OffloadPlacement::kNvme;
        c.nvme_ratio = 0.5;
      },
      0);
  EXPECT_EQ(split.info.offload.rfind("split host RAM / NVMe (0.50", 0), 0u) << split.info.offload;
  EXPECT_EQ(split.info.offload_from, "as configured");
  // The same steps on the same data: the placement does not change the math.
  ASSERT_EQ(roomy.losses.size(), 2u);
  EXPECT_EQ(roomy.losses, cramped.losses);
  EXPECT_EQ(roomy.losses, split.losses);
}

// Without --profile, train plans with the profile `bench all` saved in the
// default place, and says so with its age; a rate there changes the plan
// (the predicted step). Without one, it says it used the defaults and where
// it looked.
TEST(TrainRun, UsesTheDefaultProfileAndSaysHowOld) {
  struct Seen : public TrainReporter {
    void OnStart(const RunInfo& i) override { info = i; }
    RunInfo info;
  };
  auto run = []() {
    TempDir out;
    TrainConfig c = SmallRun(out.path());
    c.offload = OffloadPlacement::kHost;
    c.steps = 1;
    c.checkpoint_every = 0;
    c.eval_every = 0;
    Seen seen;
    auto r = RunTraining(c, seen);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return seen.info;
  };
  TempDir cache;
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string restore = old != nullptr ? old : "";
  setenv("XDG_CACHE_HOME", cache.path().c_str(), 1);
  const std::string path = cache / "tierflow/profile.json";
  const RunInfo bare = run();
  EXPECT_EQ(bare.rates.rfind("defaults; no profile at " + path, 0), 0u) << bare.rates;

  fs::create_directories(cache / "tierflow");
  const auto now = static_cast<long long>(std::time(nullptr));
  std::ofstream(path) << R"({"version": 1, "adam_params_per_second": 1000, "measured_unix": )"
                      << now - 7200 << "}";
  const RunInfo profiled = run();
  if (old != nullptr) {
    setenv("XDG_CACHE_HOME", restore.c_str(), 1);
  } else {
    unsetenv("XDG_CACHE_HOME");
  }
  EXPECT_EQ(profiled.rates.rfind("profile " + path, 0), 0u) << profiled.rates;
  EXPECT_NE(profiled.rates.find("measured 2 h ago"), std::string::npos) << profiled.rates;
  // An optimizer of 1000 params/s dominates the predicted step.
  EXPECT_GT(profiled.predicted_step_seconds, 100 * bare.predicted_step_seconds);
}

// A Hugging Face directory holding tiny-llama with weights `edit` changes.
std::string TinyLlamaDir(const std::string& dir,
                         const std::function<void(std::vector<float>&)>& edit) {
  auto preset = ResolveTrainableModel("tiny-llama");
  EXPECT_TRUE(preset.ok());
  auto layout = MakeParamLayout(preset->config);
  EXPECT_TRUE(layout.ok());
  std::vector<float> weights(layout->total_params, 0.02f);
  edit(weights);
  HfModelSaveOptions save;
  save.dtype = DType::kF32;
  EXPECT_TRUE(SaveHfModel(dir, *layout, weights.data(), save).ok());
  return dir;
}

// Finding 11: a model with NaN weights skipped every step, then exited 0 and
// saved. Every step skipped is an error saying why; the final model in OUT
// (an earlier run's) is left as it was, and no final checkpoint is written.
TEST(TrainRun, AModelWhoseEveryStepIsSkippedEndsWithAnErrorAndKeepsTheFinalModel) {
  TempDir dir;
  const std::string nan_model = TinyLlamaDir(dir / "nan-model", [](std::vector<float>& w) {
    for (size_t i = 0; i < w.size(); i += 7) w[i] = std::nanf("");
  });
  const std::string out = dir / "out";
  fs::create_directories(out + "/model");
  std::ofstream(out + "/model/earlier-model") << "a good model";
  TrainConfig c = SmallRun(out);
  c.model = nan_model;
  c.tokenizer = "byte";
  c.dtype = DType::kF32;
  c.offload = OffloadPlacement::kHost;
  c.steps = 3;
  c.eval_every = 0;
  TrainReporter quiet;
  auto r = RunTraining(c, quiet);
  ASSERT_FALSE(r.ok()) << "every step was skipped, and the run said nothing";
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("every step of this run was skipped (3 of 3"), std::string::npos) << m;
  EXPECT_NE(m.find("not finite"), std::string::npos) << m;
  EXPECT_NE(m.find(out + "/model is left as it was"), std::string::npos) << m;
  EXPECT_EQ(ReadFile(out + "/model/earlier-model"), "a good model");
  EXPECT_TRUE(ListCheckpoints(out).empty()) << "no final checkpoint of an untrained model";
}

// Finding 11 (tensors): --allow-unused-tensors with nothing to load is
// accepted-and-ignored input: refused.
TEST(TrainRun, AllowUnusedTensorsWithoutWeightsIsRefused) {
  TempDir dir;
  TrainConfig c = SmallRun(dir / "out");
  c.allow_unused_tensors = true;
  TrainReporter quiet;
  auto r = RunTraining(c, quiet);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--allow-unused-tensors"), std::string::npos)
      << r.status().ToString();
}

// Finding 12: resuming with another model said "unit 0 is 'embeddings'
// there but 'embeddings' here"; the sizes differ, and the message says so.
TEST(TrainRun, ResumingAnotherModelSaysTheUnitSizesDiffer) {
  TempDir dir;
  TrainConfig c = SmallRun(dir / "out");
  c.steps = 1;
  c.checkpoint_every = 1;
  c.eval_every = 0;
  c.offload = OffloadPlacement::kHost;
  TrainReporter quiet;
  ASSERT_TRUE(RunTraining(c, quiet).ok());
  // tiny-llama with a larger vocabulary: the same units, the embeddings bigger.
  auto preset = ResolveTrainableModel("tiny-llama");
  ASSERT_TRUE(preset.ok());
  nlohmann::json j = nlohmann::json::parse(HfConfigJson(preset->config, DType::kF32).value());
  j["vocab_size"] = preset->config.vocab_size * 2;
  const std::string other = dir / "other.json";
  std::ofstream(other) << j.dump();
  c.model = other;
  c.tokenizer = "byte";
  c.steps = 2;
  c.resume = true;
  auto r = RunTraining(c, quiet);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  const std::string embeddings = std::to_string(preset->config.vocab_size * preset->config.d_model);
  const std::string doubled =
      std::to_string(2 * preset->config.vocab_size * preset->config.d_model);
  EXPECT_NE(m.find("of " + embeddings + " parameters there"), std::string::npos) << m;
  EXPECT_NE(m.find("of " + doubled + " parameters here"), std::string::npos) << m;
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
      {"token id beyond vocab",
       [&](TrainConfig& t) {
         t.data = bad_tokens;
         t.token_dtype = TrainTokenDtype::kU16;
       },
       "bad.bin"},
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

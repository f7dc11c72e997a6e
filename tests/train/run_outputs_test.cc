// What `tierflow train` writes (issue 40): never through a link, never into
// a hard-linked file, never into its inputs, and every output path checked
// before the first step; the user's files in OUT/model survive a save. Each
// test is named after the finding it pins and failed on the tree before the
// fix (the linked file was overwritten, the user's files deleted, the run
// trained before finding its trace path bad).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-outputs-") {}
};

std::string ReadFile(const std::string& path) { return testing_common::ReadWholeFile(path); }

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Two steps of tiny-llama on the CPU device, state in host RAM.
TrainConfig TinyRun(const std::string& out) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 1;
  c.seq_len = 16;
  c.grad_accum = 1;
  c.steps = 2;
  c.offload = OffloadPlacement::kHost;
  c.checkpoint_every = 0;
  c.eval_every = 0;
  c.out_dir = out;
  c.device.choice = DeviceChoice::kCpu;
  return c;
}

// Counts the steps run and keeps the notes.
class Recorder : public TrainReporter {
 public:
  void OnStep(const StepReport&) override { ++steps; }
  void OnNote(const std::string& m) override { notes += m + "\n"; }
  int steps = 0;
  std::string notes;
};

TEST(RunOutputs, MetricsSymlinkIsRefusedNotFollowed) {
  TempDir out, elsewhere;
  const std::string victim = elsewhere / "precious.txt";
  WriteFile(victim, "not tierflow's");
  ASSERT_EQ(::symlink(victim.c_str(), (out / "metrics.jsonl").c_str()), 0);
  Recorder seen;
  auto r = RunTraining(TinyRun(out.path()), seen);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), out / "metrics.jsonl")) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "symbolic link")) << r.status().ToString();
  EXPECT_EQ(seen.steps, 0);
  EXPECT_EQ(ReadFile(victim), "not tierflow's");
  EXPECT_TRUE(fs::is_symlink(out / "metrics.jsonl"));

  // The same for a --metrics path named outside OUT.
  TrainConfig named = TinyRun(out.path());
  named.metrics_path = elsewhere / "metrics.jsonl";
  ASSERT_EQ(::symlink(victim.c_str(), named.metrics_path.c_str()), 0);
  r = RunTraining(named, seen);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), named.metrics_path)) << r.status().ToString();
  EXPECT_EQ(ReadFile(victim), "not tierflow's");
}

TEST(RunOutputs, MetricsHardLinkIsNotOverwritten) {
  TempDir out, elsewhere;
  const std::string victim = elsewhere / "precious.txt";
  WriteFile(victim, "not tierflow's");
  ASSERT_EQ(::link(victim.c_str(), (out / "metrics.jsonl").c_str()), 0);
  Recorder seen;
  auto r = RunTraining(TinyRun(out.path()), seen);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "hard links")) << r.status().ToString();
  EXPECT_EQ(seen.steps, 0);
  EXPECT_EQ(ReadFile(victim), "not tierflow's");

  // A resumed run appends: refused the same way, before anything is appended.
  ASSERT_EQ(::unlink((out / "metrics.jsonl").c_str()), 0);
  TrainConfig first = TinyRun(out.path());
  first.checkpoint_every = 1;
  ASSERT_TRUE(RunTraining(first, seen).ok());
  ASSERT_EQ(::unlink((out / "metrics.jsonl").c_str()), 0);
  ASSERT_EQ(::link(victim.c_str(), (out / "metrics.jsonl").c_str()), 0);
  TrainConfig more = first;
  more.steps = 3;
  more.resume = true;
  r = RunTraining(more, seen);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ReadFile(victim), "not tierflow's");
}

TEST(RunOutputs, CheckpointsSymlinkIsRefusedNotFollowed) {
  TempDir out, elsewhere;
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), (out / "checkpoints").c_str()), 0);
  TrainConfig c = TinyRun(out.path());
  c.checkpoint_every = 1;
  Recorder seen;
  auto r = RunTraining(c, seen);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), out / "checkpoints")) << r.status().ToString();
  EXPECT_EQ(seen.steps, 0);
  EXPECT_TRUE(fs::is_empty(elsewhere.path()));
}

TEST(RunOutputs, UserFilesInOutModelAreKept) {
  TempDir out, elsewhere;
  Recorder seen;
  ASSERT_TRUE(RunTraining(TinyRun(out.path()), seen).ok());
  const std::string model = out / "model";
  // The user's: a file, a directory with a file, a link (kept as a link).
  WriteFile(model + "/README.md", "my notes");
  fs::create_directories(model + "/eval");
  WriteFile(model + "/eval/scores.json", "{\"acc\": 0.5}");
  WriteFile(elsewhere / "target.txt", "linked");
  ASSERT_EQ(::symlink((elsewhere / "target.txt").c_str(), (model + "/latest").c_str()), 0);
  // tierflow's names this save does not write: a shard of a save with
  // another shard count, a tokenizer of another model. Dropped, said so.
  WriteFile(model + "/model-00001-of-00002.safetensors", "stale shard");
  WriteFile(model + "/tokenizer.json", "{}");

  Recorder again;
  auto r = RunTraining(TinyRun(out.path()), again);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFile(model + "/README.md"), "my notes");
  EXPECT_EQ(ReadFile(model + "/eval/scores.json"), "{\"acc\": 0.5}");
  ASSERT_TRUE(fs::is_symlink(model + "/latest"));
  EXPECT_EQ(fs::read_symlink(model + "/latest"), elsewhere / "target.txt");
  EXPECT_EQ(ReadFile(elsewhere / "target.txt"), "linked");
  EXPECT_FALSE(fs::exists(model + "/model-00001-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(model + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(model + "/model.safetensors"));
  EXPECT_TRUE(Contains(again.notes, "README.md, eval, latest")) << again.notes;
  EXPECT_TRUE(
      Contains(again.notes, "dropped from " + model + " the previous model's tokenizer.json"))
      << again.notes;
  for (const auto& e : fs::directory_iterator(out.path())) {
    EXPECT_NE(e.path().filename().string().rfind(".model.", 0), 0u) << "left behind: " << e.path();
  }
}

// A crash between ReplaceDirectory's two renames leaves the previous model
// only in its aside copy; the next save removed it with the user's files.
TEST(RunOutputs, ModelLeftOnlyAsideByACrashIsPutBackWithTheUsersFiles) {
  TempDir out;
  const std::string aside = out / ".model.old-999999";
  fs::create_directories(aside);
  WriteFile(aside + "/model.safetensors", "the previous weights");
  WriteFile(aside + "/notes.txt", "mine");
  Recorder seen;
  auto r = RunTraining(TinyRun(out.path()), seen);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFile(out / "model/notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(aside));
  EXPECT_TRUE(Contains(seen.notes, "put the previous model back")) << seen.notes;
}

TEST(RunOutputs, OutModelAsASymlinkIsRefusedBeforeTheFirstStep) {
  TempDir out, elsewhere;
  WriteFile(elsewhere / "keep.txt", "keep");
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), (out / "model").c_str()), 0);
  Recorder seen;
  auto r = RunTraining(TinyRun(out.path()), seen);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), out / "model")) << r.status().ToString();
  EXPECT_EQ(seen.steps, 0);
  EXPECT_TRUE(fs::is_symlink(out / "model"));
  EXPECT_EQ(ReadFile(elsewhere / "keep.txt"), "keep");
}

TEST(RunOutputs, BadTracePathFailsBeforeTheFirstStep) {
  TempDir out, elsewhere;
  WriteFile(elsewhere / "a-file", "x");
  fs::create_directories(elsewhere / "a-dir");
  WriteFile(elsewhere / "target.json", "keep");
  ASSERT_EQ(::symlink((elsewhere / "target.json").c_str(), (elsewhere / "link.json").c_str()), 0);
  struct Case {
    std::string trace, says;
  };
  const std::vector<Case> cases = {
      {elsewhere / "no-such-dir/trace.json", "does not exist"},
      {elsewhere / "a-file/trace.json", "not a directory"},
      {elsewhere / "a-dir", "is a directory"},
      {elsewhere / "link.json", "symbolic link"},
      {elsewhere / "a-dir/", "names no file"},
  };
  for (const Case& c : cases) {
    TrainConfig config = TinyRun(out.path());
    config.trace_path = c.trace;
    config.trace_steps = {2};
    Recorder seen;
    auto r = RunTraining(config, seen);
    ASSERT_FALSE(r.ok()) << c.trace;
    EXPECT_TRUE(Contains(r.status().message(), c.trace)) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), c.says)) << r.status().ToString();
    EXPECT_EQ(seen.steps, 0) << c.trace << ": trained before finding the trace path bad";
  }
  EXPECT_EQ(ReadFile(elsewhere / "target.json"), "keep");
  EXPECT_FALSE(fs::exists(out / "model"));

  // A good one is written, after the traced step's metrics line.
  TrainConfig good = TinyRun(out.path());
  good.trace_path = elsewhere / "trace.json";
  Recorder seen;
  auto r = RunTraining(good, seen);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Contains(ReadFile(good.trace_path), "traceEvents"));
}

// A run never writes into what it reads: its model (a directory trained
// from, or OUT/model itself, which the save would replace), the checkpoint it
// resumes from, its data.
TEST(RunOutputs, TrainingNeverWritesIntoItsInputs) {
  TempDir base, out;
  Recorder seen;
  ASSERT_TRUE(RunTraining(TinyRun(base.path()), seen).ok());
  const std::string model = base / "model";
  const std::string weights = ReadFile(model + "/model.safetensors");
  auto refused = [&](TrainConfig c, const std::string& names) {
    Recorder r;
    auto result = RunTraining(c, r);
    ASSERT_FALSE(result.ok()) << names;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status().ToString();
    EXPECT_TRUE(Contains(result.status().message(), names)) << result.status().ToString();
    EXPECT_EQ(r.steps, 0);
  };
  TrainConfig again = TinyRun(base.path());
  again.model = model;
  refused(again, "--model " + model + " is inside " + model);

  TrainConfig inside = TinyRun(model + "/run");
  inside.model = model;
  refused(inside, "--out " + model + "/run is inside --model " + model);

  TrainConfig trace = TinyRun(out.path());
  trace.model = model;
  trace.trace_path = model + "/trace.json";
  refused(trace, "--trace " + model + "/trace.json is inside --model " + model);

  TrainConfig metrics = TinyRun(out.path());
  metrics.data = base / "data.txt";
  WriteFile(metrics.data, std::string(4096, 'a'));
  metrics.metrics_path = metrics.data;
  refused(metrics, "--metrics " + metrics.data + " is --data " + metrics.data);
  EXPECT_EQ(ReadFile(metrics.data), std::string(4096, 'a'));

  TrainConfig traced_into_checkpoints = TinyRun(base.path());
  traced_into_checkpoints.trace_path = base / "checkpoints/trace.json";
  fs::create_directories(base / "checkpoints");
  refused(traced_into_checkpoints, "is inside " + base / "checkpoints");

  EXPECT_EQ(ReadFile(model + "/model.safetensors"), weights);
  EXPECT_FALSE(fs::exists(model + "/run"));
  EXPECT_FALSE(fs::exists(model + "/trace.json"));
}

}  // namespace
}  // namespace tierflow

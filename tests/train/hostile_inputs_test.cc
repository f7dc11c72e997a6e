// Issue 18's "done when", end to end through the `tierflow` binary: a crafted
// checkpoint, a 100000-deep JSON, a 10^15-layer config and two concurrent
// runs on one --out each end in a clear error and an exit status (never a
// signal such as SIGABRT or SIGSEGV), and nothing outside the run's
// directories is touched. The unit-level regression tests live beside the
// code they pin; this test holds the promise for the command as users run it.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"
#include "tests/common/spawn.h"

namespace {
namespace fs = std::filesystem;
using tierflow::testing_common::ReadWholeFile;
using tierflow::testing_common::ScratchDir;

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  return tierflow::testing_common::SpawnLogged(TIERFLOW_BINARY, args, log);
}

struct Outcome {
  bool exited = false;  // false: ended by a signal
  int code = -1;        // exit status, or the signal number
  std::string output;
};

Outcome Wait(pid_t pid, const std::string& log) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  Outcome o;
  o.exited = WIFEXITED(status);
  o.code = o.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  o.output = ReadWholeFile(log);
  return o;
}

Outcome RunTierflow(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = Spawn(args, log);
  EXPECT_GT(pid, 0);
  return Wait(pid, log);
}

// Every regular file under `root` with its size and modification time, to
// show that a command left a directory exactly as it was.
std::map<std::string, std::pair<uintmax_t, int64_t>> Snapshot(const std::string& root) {
  std::map<std::string, std::pair<uintmax_t, int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) != 0) continue;
    out[e.path().string()] = {
        static_cast<uintmax_t>(st.st_size),
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

std::vector<std::string> TrainArgs(const std::string& out, const std::string& nvme, int steps) {
  return {"train",
          "--model",
          "tiny-llama",
          "--steps",
          std::to_string(steps),
          "--micro-batch",
          "2",
          "--seq-len",
          "32",
          "--checkpoint-every",
          "1",
          "--eval-every",
          "0",
          "--device",
          "cpu",
          "--offload-optimizer",
          "host",
          "--nvme-path",
          nvme,
          "--out",
          out};
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(HostileInputs, DeeplyNestedConfigJsonIsAClearErrorForPlanAndTrain) {
  ScratchDir dir;
  fs::create_directories(dir / "model");
  const int depth = 100000;
  WriteFile(dir / "model/config.json", std::string(depth, '[') + std::string(depth, ']'));
  Outcome plan = RunTierflow({"plan", "--model", dir / "model"}, dir / "plan.log");
  ASSERT_TRUE(plan.exited) << "ended by signal " << plan.code << "\n" << plan.output;
  EXPECT_NE(plan.code, 0);
  EXPECT_NE(plan.output.find("config.json"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("nested deeper"), std::string::npos) << plan.output;

  Outcome train = RunTierflow(
      {"train", "--model", dir / "model", "--steps", "1", "--device", "cpu", "--out", dir / "out"},
      dir / "train.log");
  ASSERT_TRUE(train.exited) << "ended by signal " << train.code << "\n" << train.output;
  EXPECT_NE(train.code, 0);
  EXPECT_NE(train.output.find("nested deeper"), std::string::npos) << train.output;
}

TEST(HostileInputs, TenToTheFifteenLayersIsRefusedNotSpun) {
  ScratchDir dir;
  fs::create_directories(dir / "model");
  WriteFile(dir / "model/config.json",
            R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 1000000000000000, "hidden_size": 4096,
                "intermediate_size": 11008, "num_attention_heads": 32,
                "num_key_value_heads": 32, "vocab_size": 32000,
                "max_position_embeddings": 4096, "rms_norm_eps": 1e-5})");
  Outcome plan = RunTierflow({"plan", "--model", dir / "model"}, dir / "plan.log");
  ASSERT_TRUE(plan.exited) << "ended by signal " << plan.code << "\n" << plan.output;
  EXPECT_NE(plan.code, 0);
  EXPECT_NE(plan.output.find("num_hidden_layers"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("1000000000000000"), std::string::npos) << plan.output;
}

// A checkpoint whose trainer_state.json names a unit "../../outside/victim":
// verify must call it corrupt, export must refuse it, and the planted file
// outside the checkpoint must be neither read into the export nor changed.
TEST(HostileInputs, CraftedCheckpointNamingAPathOutsideItIsRefused) {
  ScratchDir dir;
  Outcome train = RunTierflow(TrainArgs(dir / "out", dir / "nvme", 1), dir / "train.log");
  ASSERT_TRUE(train.exited && train.code == 0) << train.output;
  std::string ckpt;
  for (const auto& e : fs::directory_iterator(dir / "out/checkpoints")) {
    if (e.path().filename().string().rfind("step-", 0) == 0) ckpt = e.path().string();
  }
  ASSERT_FALSE(ckpt.empty());

  nlohmann::json state = nlohmann::json::parse(ReadWholeFile(ckpt + "/trainer_state.json"));
  ASSERT_TRUE(state["units"].is_array() && !state["units"].empty());
  const std::string unit = state["units"][0]["name"].get<std::string>();
  // The planted target is a real unit file, so following the name would "work".
  fs::create_directories(dir / "outside");
  fs::copy_file(ckpt + "/optimizer/" + unit + ".safetensors", dir / "outside/victim.safetensors");
  // Two levels up from optimizer/ is the checkpoints folder; three is out/.
  state["units"][0]["name"] = "../../../../outside/victim";
  // As version 1 (before the checksum), which is still read: the checksum
  // would otherwise refuse the edit before the name is looked at.
  state["version"] = 1;
  state.erase("crc32c");
  WriteFile(ckpt + "/trainer_state.json", state.dump(2));
  const auto outside_before = Snapshot(dir / "outside");

  Outcome verify = RunTierflow({"tier", "verify", ckpt}, dir / "verify.log");
  ASSERT_TRUE(verify.exited) << "ended by signal " << verify.code << "\n" << verify.output;
  EXPECT_NE(verify.code, 0) << verify.output;
  EXPECT_NE(verify.output.find("outside/victim"), std::string::npos) << verify.output;

  Outcome exported = RunTierflow({"tier", "export", ckpt, "--out", dir / "export.safetensors"},
                                 dir / "export.log");
  ASSERT_TRUE(exported.exited) << "ended by signal " << exported.code << "\n" << exported.output;
  EXPECT_NE(exported.code, 0) << exported.output;
  EXPECT_FALSE(fs::exists(dir / "export.safetensors"));

  Outcome migrated = RunTierflow(
      {"tier", "migrate", ckpt, "--to", "nvme", "--nvme-path", dir / "nvme2", "--nvme-buffered"},
      dir / "migrate.log");
  ASSERT_TRUE(migrated.exited) << "ended by signal " << migrated.code << "\n" << migrated.output;
  EXPECT_NE(migrated.code, 0) << migrated.output;

  EXPECT_EQ(Snapshot(dir / "outside"), outside_before);
}

TEST(HostileInputs, SecondRunOnTheSameOutIsRefusedWithTheHoldersPid) {
  ScratchDir dir;
  const pid_t first = Spawn(TrainArgs(dir / "out", dir / "nvme", 100000), dir / "first.log");
  ASSERT_GT(first, 0);
  // Wait until the first run is training (its metrics file exists once it
  // holds the lock and has finished a step).
  for (int i = 0; i < 600 && !fs::exists(dir / "out/metrics.jsonl"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(fs::exists(dir / "out/metrics.jsonl")) << ReadWholeFile(dir / "first.log");
  const auto metrics_before = fs::file_size(dir / "out/metrics.jsonl");

  Outcome second = RunTierflow(TrainArgs(dir / "out", dir / "nvme", 3), dir / "second.log");
  ASSERT_TRUE(second.exited) << "ended by signal " << second.code << "\n" << second.output;
  EXPECT_NE(second.code, 0);
  EXPECT_NE(second.output.find(std::to_string(first)), std::string::npos) << second.output;
  EXPECT_NE(second.output.find(dir / "out"), std::string::npos) << second.output;

  // The first run went on undisturbed: its metrics only grew, and a SIGTERM
  // still stops it cleanly with a checkpoint.
  ::kill(first, SIGTERM);
  Outcome first_done = Wait(first, dir / "first.log");
  ASSERT_TRUE(first_done.exited) << first_done.output;
  EXPECT_EQ(first_done.code, 0) << first_done.output;
  EXPECT_GE(fs::file_size(dir / "out/metrics.jsonl"), metrics_before);
  Outcome verify = RunTierflow({"tier", "verify", dir / "out"}, dir / "verify.log");
  EXPECT_TRUE(verify.exited && verify.code == 0) << verify.output;
}

}  // namespace

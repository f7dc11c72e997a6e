// Crash test: `tierflow train` killed with SIGKILL at random moments
// (checkpointing every step, so many kills land inside a checkpoint write),
// then resumed, ends with weights identical to an uninterrupted run, and
// leaves no swap files behind. TIERFLOW_CRASH_ITERATIONS sets how many
// kill-and-resume rounds run (default 3; the long mode uses many more).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"
#include "tests/common/spawn.h"

#include "offload/swap_set.h"

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  return tierflow::testing_common::ReadWholeFile(path);
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  return tierflow::testing_common::SpawnLogged(TIERFLOW_BINARY, args, log, /*append=*/true);
}

int WaitExit(pid_t pid) { return tierflow::testing_common::WaitExitCode(pid); }

std::vector<std::string> TrainArgs(const std::string& dir, bool resume,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {
      "train", "--model",      "tiny-llama",  "--steps",      "6",         "--micro-batch",
      "2",     "--seq-len",    "32",          "--grad-accum", "2",         "--checkpoint-every",
      "1",     "--eval-every", "0",           "--device",     "cpu",       "--sub-group-size",
      "40000", "--nvme-path",  dir + "/nvme", "--out",        dir + "/out"};
  if (resume) a.push_back("--resume");
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CrashTest, KilledRunsResumeToTheSameWeights) {
  const char* env = std::getenv("TIERFLOW_CRASH_ITERATIONS");
  const int iterations = env != nullptr ? std::max(1, std::atoi(env)) : 3;
  const std::string root =
      (fs::temp_directory_path() / ("tierflow-crash-" + std::to_string(getpid()))).string();
  fs::remove_all(root);
  fs::create_directories(root);

  const std::string ref = root + "/reference";
  fs::create_directories(ref);
  auto t0 = Clock::now();
  pid_t pid = Spawn(TrainArgs(ref, false), ref + "/log.txt");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(WaitExit(pid), 0) << ReadFile(ref + "/log.txt");
  const double run_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string expected = ReadFile(ref + "/out/model/model.safetensors");
  ASSERT_FALSE(expected.empty());

  const unsigned seed = static_cast<unsigned>(std::random_device{}());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> when(0.05 * run_seconds, 0.95 * run_seconds);
  for (int it = 0; it < iterations; ++it) {
    const std::string dir = root + "/run" + std::to_string(it);
    fs::create_directories(dir);
    for (int kill_no = 0; kill_no < 2; ++kill_no) {
      pid = Spawn(TrainArgs(dir, kill_no > 0), dir + "/log.txt");
      ASSERT_GT(pid, 0);
      const double delay = when(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      kill(pid, SIGKILL);
      WaitExit(pid);
      std::ofstream(dir + "/log.txt", std::ios::app) << "\n== killed after " << delay << " s ==\n";
    }
    pid = Spawn(TrainArgs(dir, true), dir + "/log.txt");
    ASSERT_EQ(WaitExit(pid), 0) << "seed " << seed << "\n" << ReadFile(dir + "/log.txt");
    EXPECT_EQ(ReadFile(dir + "/out/model/model.safetensors"), expected)
        << "iteration " << it << " (seed " << seed << ") ended with other weights\n"
        << ReadFile(dir + "/log.txt");
    // The clean final run removed its swap set and the stale ones of the killed runs.
    auto sets = tierflow::offload::ListSwapSets(dir + "/nvme");
    ASSERT_TRUE(sets.ok());
    EXPECT_TRUE(sets->empty()) << "iteration " << it << ": " << sets->size() << " swap sets left";
  }
  fs::remove_all(root);
}

// The same with the gradients on the drives (issue 45): killed mid-step,
// mid-checkpoint or while gradient files are written, then resumed, the run
// ends with the weights of an uninterrupted run keeping them in host memory,
// and the killed runs' swap sets (gradient files included) are cleaned up.
TEST(CrashTest, KilledRunsWithGradientsOnTheDrivesResumeToTheSameWeights) {
  const std::string root =
      (fs::temp_directory_path() / ("tierflow-crash-grads-" + std::to_string(getpid()))).string();
  fs::remove_all(root);
  fs::create_directories(root);
  const std::vector<std::string> host = {"--offload-optimizer", "nvme", "--offload-gradients",
                                         "host"};
  const std::vector<std::string> nvme = {"--offload-optimizer", "nvme", "--offload-gradients",
                                         "nvme"};
  const std::string ref = root + "/reference";
  fs::create_directories(ref);
  auto t0 = Clock::now();
  pid_t pid = Spawn(TrainArgs(ref, false, host), ref + "/log.txt");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(WaitExit(pid), 0) << ReadFile(ref + "/log.txt");
  const double run_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string expected = ReadFile(ref + "/out/model/model.safetensors");
  ASSERT_FALSE(expected.empty());
  const unsigned seed = static_cast<unsigned>(std::random_device{}());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> when(0.05 * run_seconds, 0.95 * run_seconds);
  const std::string dir = root + "/run";
  fs::create_directories(dir);
  for (int kill_no = 0; kill_no < 2; ++kill_no) {
    pid = Spawn(TrainArgs(dir, kill_no > 0, nvme), dir + "/log.txt");
    ASSERT_GT(pid, 0);
    const double delay = when(rng);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    kill(pid, SIGKILL);
    WaitExit(pid);
    std::ofstream(dir + "/log.txt", std::ios::app) << "\n== killed after " << delay << " s ==\n";
  }
  pid = Spawn(TrainArgs(dir, true, nvme), dir + "/log.txt");
  ASSERT_EQ(WaitExit(pid), 0) << "seed " << seed << "\n" << ReadFile(dir + "/log.txt");
  EXPECT_EQ(ReadFile(dir + "/out/model/model.safetensors"), expected)
      << "seed " << seed << ": other weights\n"
      << ReadFile(dir + "/log.txt");
  auto sets = tierflow::offload::ListSwapSets(dir + "/nvme");
  ASSERT_TRUE(sets.ok());
  EXPECT_TRUE(sets->empty()) << sets->size() << " swap sets left";
  fs::remove_all(root);
}

TEST(CrashTest, SigtermSavesACheckpointAndExitsCleanly) {
  const std::string dir =
      (fs::temp_directory_path() / ("tierflow-sigterm-" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> args = TrainArgs(dir, false);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--steps") args[i + 1] = "100000";  // runs until stopped
    if (args[i] == "--checkpoint-every") args[i + 1] = "0";
  }
  args.push_back("--trace");
  args.push_back(dir + "/trace.json");
  const pid_t pid = Spawn(args, dir + "/log.txt");
  ASSERT_GT(pid, 0);
  // Wait for a few steps of progress (the metrics file grows), then ask it to stop.
  const std::string metrics = dir + "/out/metrics.jsonl";
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(metrics);
    int lines = 0;
    std::string l;
    while (std::getline(in, l)) ++lines;
    if (lines >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << ReadFile(dir + "/log.txt");
  const std::string log = ReadFile(dir + "/log.txt");
  EXPECT_NE(log.find("stopped by SIGTERM"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(dir + "/out/checkpoints")) << log;
  EXPECT_TRUE(fs::exists(dir + "/trace.json")) << "--trace without --trace-steps traces step 2";
  auto sets = tierflow::offload::ListSwapSets(dir + "/nvme");
  ASSERT_TRUE(sets.ok());
  EXPECT_TRUE(sets->empty()) << "the swap set must be removed at a clean exit";
  fs::remove_all(dir);
}

}  // namespace

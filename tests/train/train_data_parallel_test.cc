// Data-parallel `tierflow train` through the binary: N ranks (started by
// --nproc-per-node, or by mpirun itself) against one process accumulating
// the same micro-batches, bit for bit (metrics, the saved model, every
// checkpoint file), with the state on the host or on NVMe; a checkpoint
// resumed on other world sizes; and what is refused, with the numbers. 2-4 ranks on CI's 2 cores
// (oversubscribed).
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/swap_set_owner.h"
#include "offload/swap_set.h"
#include "tests/common/mpi_environment.h"
#include "tests/common/scratch_dir.h"
#include "tests/common/spawn.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_common::ReadWholeFile;
using testing_common::ScratchDir;

int RunCommand(const char* binary, const std::vector<std::string>& args, const std::string& log,
               std::string* text) {
  const pid_t pid = testing_common::SpawnLogged(binary, args, log);
  EXPECT_GT(pid, 0);
  const int code = testing_common::WaitExitCode(pid);
  *text = ReadWholeFile(log);
  return code;
}

// A tiny model on the CPU device, state on the host tier.
std::vector<std::string> TrainArgs(const std::string& out, int grad_accum, int steps) {
  return {"train",
          "--model",
          "tiny-llama",
          "--micro-batch",
          "2",
          "--seq-len",
          "32",
          "--eval-every",
          "0",
          "--device",
          "cpu",
          "--offload-optimizer",
          "host",
          "--grad-accum",
          std::to_string(grad_accum),
          "--steps",
          std::to_string(steps),
          "--out",
          out};
}

std::vector<std::string> WithRanks(int n, std::vector<std::string> args) {
  args.insert(args.begin() + 1, {"--nproc-per-node", std::to_string(n)});
  return args;
}

// Each step's loss, grad_norm and clip_coef as metrics.jsonl wrote them.
std::vector<std::string> Curve(const std::string& out) {
  std::vector<std::string> rows;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    rows.push_back(j["loss"].dump() + " " + j["grad_norm"].dump() + " " + j["clip_coef"].dump());
  }
  return rows;
}

void ExpectSameCheckpointFiles(const std::string& a, const std::string& b) {
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(a)) {
    if (!entry.is_regular_file()) continue;
    const std::string rel = fs::relative(entry.path(), a).string();
    if (rel == "trainer_state.json") continue;  // records the world size
    ++files;
    EXPECT_EQ(ReadWholeFile(entry.path().string()), ReadWholeFile(b + "/" + rel)) << rel;
  }
  EXPECT_GT(files, 3u);
}

TEST(TrainDataParallel, NRanksAreOneProcessAccumulatingNBitForBit) {
  ScratchDir dir("tierflow-dp-");
  std::string log;
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    const std::string one = dir / ("one-" + std::to_string(n));
    const std::string many = dir / ("ranks-" + std::to_string(n));
    ASSERT_EQ(RunCommand(TIERFLOW_BINARY, TrainArgs(one, n, 4), one + ".log", &log), 0) << log;
    ASSERT_EQ(RunCommand(TIERFLOW_BINARY, WithRanks(n, TrainArgs(many, 1, 4)), many + ".log", &log),
              0)
        << log;
    // Every rank says where it runs; rank 0 alone reports the run.
    for (int r = 0; r < n; ++r) {
      EXPECT_NE(log.find("rank " + std::to_string(r) + " of " + std::to_string(n) + " (mpirun"),
                std::string::npos)
          << log;
    }
    EXPECT_NE(log.find("data parallel: " + std::to_string(n) + " ranks"), std::string::npos);
    EXPECT_EQ(Curve(one), Curve(many));
    EXPECT_EQ(Curve(many).size(), 4u);
    EXPECT_EQ(ReadWholeFile(one + "/model/model.safetensors"),
              ReadWholeFile(many + "/model/model.safetensors"));
    ExpectSameCheckpointFiles(one + "/checkpoints/step-00000004",
                              many + "/checkpoints/step-00000004");
  }
}

// Activation checkpoints in pinned host memory on every rank: the same bits
// as one process keeping them on the device.
TEST(TrainDataParallel, OffloadedCheckpointsOnTwoRanksAreOneProcessBitForBit) {
  ScratchDir dir("tierflow-dp-act-");
  std::string log;
  const std::string one = dir / "one", many = dir / "ranks";
  std::vector<std::string> kept = TrainArgs(one, 2, 2);
  kept.insert(kept.end(), {"--activation-checkpointing", "--offload-activations", "none"});
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, kept, one + ".log", &log), 0) << log;
  std::vector<std::string> moved = WithRanks(2, TrainArgs(many, 1, 2));
  moved.insert(moved.end(), {"--activation-checkpointing", "--offload-activations", "host"});
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, moved, many + ".log", &log), 0) << log;
  EXPECT_NE(log.find("activation checkpoints"), std::string::npos) << log;
  EXPECT_EQ(Curve(one), Curve(many));
  EXPECT_EQ(Curve(many).size(), 2u);
  EXPECT_EQ(ReadWholeFile(one + "/model/model.safetensors"),
            ReadWholeFile(many + "/model/model.safetensors"));
}

// Gradients on the drives on every rank (each its parts' running sum, in
// its own swap set beside its state): the same bits as one process keeping
// them in host memory, with accumulation.
TEST(TrainDataParallel, GradientsOnTheDrivesOnTwoRanksAreOneProcessBitForBit) {
  ScratchDir dir("tierflow-dp-grads-");
  std::string log;
  const std::string one = dir / "one", many = dir / "ranks";
  auto on_nvme = [&](std::vector<std::string> args, const std::string& grads) {
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--offload-optimizer") args[i + 1] = "nvme";
    }
    args.insert(args.end(), {"--nvme-path", dir / "nvme", "--nvme-buffered", "--offload-gradients",
                             grads, "--collectives", "host", "--sub-group-size", "30000"});
    return args;
  };
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, on_nvme(TrainArgs(one, 4, 3), "host"), one + ".log", &log),
            0)
      << log;
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, on_nvme(WithRanks(2, TrainArgs(many, 2, 3)), "nvme"),
                       many + ".log", &log),
            0)
      << log;
  EXPECT_NE(log.find("the step's gradients wait on NVMe"), std::string::npos) << log;
  EXPECT_EQ(Curve(one), Curve(many));
  EXPECT_EQ(Curve(many).size(), 3u);
  EXPECT_EQ(ReadWholeFile(one + "/model/model.safetensors"),
            ReadWholeFile(many + "/model/model.safetensors"));
}

// --collectives device: each piece of the gradient is summed on the devices
// (MPI over the CPU device's memory; NCCL on GPUs) and only each rank's
// part crosses, the running sum of several micro-batches kept there. The
// same bits as one process accumulating, by the same rank-ordered adds.
TEST(TrainDataParallel, DeviceCollectivesAreOneProcessBitForBit) {
  ScratchDir dir("tierflow-dp-device-");
  std::string log;
  for (const auto& [n, accum] : {std::pair{2, 2}, std::pair{3, 1}}) {
    SCOPED_TRACE(std::to_string(n) + " ranks of " + std::to_string(accum));
    const std::string one = dir / ("one-" + std::to_string(n));
    const std::string many = dir / ("ranks-" + std::to_string(n));
    ASSERT_EQ(RunCommand(TIERFLOW_BINARY, TrainArgs(one, n * accum, 3), one + ".log", &log), 0)
        << log;
    std::vector<std::string> args = WithRanks(n, TrainArgs(many, accum, 3));
    args.insert(args.end(), {"--collectives", "device"});
    ASSERT_EQ(RunCommand(TIERFLOW_BINARY, args, many + ".log", &log), 0) << log;
    EXPECT_NE(log.find("collectives: mpi-device-memory on the devices"), std::string::npos) << log;
    EXPECT_EQ(Curve(one), Curve(many));
    EXPECT_EQ(Curve(many).size(), 3u);
    EXPECT_EQ(ReadWholeFile(one + "/model/model.safetensors"),
              ReadWholeFile(many + "/model/model.safetensors"));
  }
  // A choice that is none of them is refused by name.
  const std::string bad = dir / "bad";
  std::vector<std::string> args = TrainArgs(bad, 1, 1);
  args.insert(args.end(), {"--collectives", "sideways"});
  EXPECT_NE(RunCommand(TIERFLOW_BINARY, args, bad + ".log", &log), 0);
  EXPECT_NE(log.find("collectives"), std::string::npos) << log;
  EXPECT_NE(log.find("use auto, host or device"), std::string::npos) << log;
}

TEST(TrainDataParallel, PlainMpirunRunsTheRanksToo) {
  ScratchDir dir("tierflow-dp-mpirun-");
  std::string log;
  const std::string one = dir / "one", many = dir / "mpirun";
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, TrainArgs(one, 2, 3), one + ".log", &log), 0) << log;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  std::vector<std::string> args = {"-np", "2", "--oversubscribe", TIERFLOW_BINARY};
  for (const std::string& a : TrainArgs(many, 1, 3)) args.push_back(a);
  ASSERT_EQ(RunCommand(TIERFLOW_MPIEXEC, args, many + ".log", &log), 0) << log;
  EXPECT_EQ(Curve(one), Curve(many));
  EXPECT_EQ(ReadWholeFile(one + "/model/model.safetensors"),
            ReadWholeFile(many + "/model/model.safetensors"));
  // A rank that asks for more ranks is refused: the launcher's are used.
  args = {"-np", "2", "--oversubscribe", TIERFLOW_BINARY};
  for (const std::string& a : WithRanks(2, TrainArgs(dir / "twice", 1, 1))) args.push_back(a);
  EXPECT_NE(RunCommand(TIERFLOW_MPIEXEC, args, dir / "twice.log", &log), 0);
  EXPECT_NE(log.find("leave --nproc-per-node out under a launcher"), std::string::npos) << log;
}

TEST(TrainDataParallel, ACheckpointResumesOnOtherWorldSizesBitForBit) {
  ScratchDir dir("tierflow-dp-resume-");
  std::string log;
  // Global batch: 4 micro-batches of 2 sequences per step.
  const std::string whole = dir / "whole", two = dir / "two";
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, TrainArgs(whole, 4, 4), whole + ".log", &log), 0) << log;
  std::vector<std::string> args = WithRanks(2, TrainArgs(two, 2, 4));
  args.insert(args.end(), {"--checkpoint-every", "2"});
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, args, two + ".log", &log), 0) << log;
  const std::string expected = ReadWholeFile(whole + "/model/model.safetensors");
  EXPECT_EQ(ReadWholeFile(two + "/model/model.safetensors"), expected);
  ASSERT_TRUE(fs::exists(two + "/checkpoints/step-00000002")) << log;

  struct Case {
    std::string name;
    int ranks, grad_accum;
  };
  for (const Case& c : {Case{"four-ranks", 4, 1}, Case{"one-rank", 1, 4}}) {
    SCOPED_TRACE(c.name);
    const std::string out = dir / c.name;
    fs::create_directories(out + "/checkpoints");
    fs::copy(two + "/checkpoints/step-00000002", out + "/checkpoints/step-00000002",
             fs::copy_options::recursive);
    std::vector<std::string> resume = TrainArgs(out, c.grad_accum, 4);
    if (c.ranks > 1) resume = WithRanks(c.ranks, resume);
    resume.push_back("--resume");
    ASSERT_EQ(RunCommand(TIERFLOW_BINARY, resume, out + ".log", &log), 0) << log;
    EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
    EXPECT_EQ(ReadWholeFile(out + "/model/model.safetensors"), expected)
        << "steps 3-4 after a 2-rank checkpoint ended with other weights";
    std::vector<std::string> tail = Curve(whole);
    tail.erase(tail.begin(), tail.begin() + 2);
    EXPECT_EQ(Curve(out), tail);
  }

  // 3 ranks of micro-batch 2 cannot share 8 sequences per step: refused,
  // with the numbers, before anything trains.
  const std::string three = dir / "three";
  fs::create_directories(three + "/checkpoints");
  fs::copy(two + "/checkpoints/step-00000002", three + "/checkpoints/step-00000002",
           fs::copy_options::recursive);
  args = WithRanks(3, TrainArgs(three, 1, 4));
  args.push_back("--resume");
  EXPECT_NE(RunCommand(TIERFLOW_BINARY, args, three + ".log", &log), 0);
  EXPECT_NE(log.find("written by 2 ranks with 8 sequences per step"), std::string::npos) << log;
  EXPECT_NE(log.find("3 ranks of micro-batch 2 cannot share 8 sequences per step"),
            std::string::npos)
      << log;
  EXPECT_FALSE(fs::exists(three + "/metrics.jsonl"));
  // 2 ranks with another accumulation: told the one that keeps the batch.
  args = WithRanks(4, TrainArgs(three, 2, 4));
  args.push_back("--resume");
  EXPECT_NE(RunCommand(TIERFLOW_BINARY, args, three + "-b.log", &log), 0);
  EXPECT_NE(log.find("resume with --grad-accum 1 to keep it"), std::string::npos) << log;
}

// The pid rank `r` logged ("rank R of N (..., pid P)"), or -1 until it has.
pid_t RankPid(const std::string& log, int r) {
  const std::string key = "rank " + std::to_string(r) + " of ";
  const size_t at = log.find(key);
  if (at == std::string::npos) return -1;
  const size_t pid_at = log.find("pid ", at);
  return pid_at == std::string::npos ? -1 : static_cast<pid_t>(std::atoi(log.c_str() + pid_at + 4));
}

// One rank of three is stopped (SIGSTOP) or killed mid-run: the others end
// the job within the rank timeout, naming it, and the last complete
// checkpoint resumes (on one process).
void StopOneRankMidRun(int signal, const std::string& expected) {
  ScratchDir dir("tierflow-dp-fault-");
  const std::string out = dir / "out";
  std::vector<std::string> args = WithRanks(3, TrainArgs(out, 1, 100000));
  args.insert(args.end(), {"--checkpoint-every", "10", "--rank-timeout", "5"});
  const pid_t job = testing_common::SpawnLogged(TIERFLOW_BINARY, args, dir / "log");
  ASSERT_GT(job, 0);
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    victim = RankPid(ReadWholeFile(dir / "log"), 2);
    if (victim > 0 && fs::exists(out + "/checkpoints/step-00000010")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(victim, 0) << ReadWholeFile(dir / "log");
  ASSERT_EQ(::kill(victim, signal), 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  const int code = testing_common::WaitExitCode(job);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  (void)::kill(victim, SIGKILL);  // never leave a stopped rank behind
  const std::string log = ReadWholeFile(dir / "log");
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(seconds, 60.0) << log;
  EXPECT_NE(log.find(expected), std::string::npos) << log;

  // The newest checkpoint that verifies goes on, on one process.
  args = TrainArgs(out, 3, 0);
  args.push_back("--resume");
  std::string resumed;
  const pid_t again =
      testing_common::SpawnLogged(TIERFLOW_BINARY, {"tier", "ls", out}, dir / "ls.log");
  EXPECT_EQ(testing_common::WaitExitCode(again), 0) << ReadWholeFile(dir / "ls.log");
  int last = 0;
  for (const auto& entry : fs::directory_iterator(out + "/checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0) last = std::max(last, std::atoi(name.c_str() + 5));
  }
  ASSERT_GE(last, 10);
  args = TrainArgs(out, 3, last + 2);
  args.push_back("--resume");
  EXPECT_EQ(RunCommand(TIERFLOW_BINARY, args, dir / "resume.log", &resumed), 0) << resumed;
  EXPECT_NE(resumed.find("resumed from"), std::string::npos) << resumed;
}

TEST(TrainDataParallel, AStoppedRankEndsTheJobNamingItAndTheCheckpointResumes) {
  StopOneRankMidRun(SIGSTOP, "has not been heard from");
}

TEST(TrainDataParallel, AKilledRankEndsTheJobAndTheCheckpointResumes) {
  // mpirun notices the death itself (or the heartbeat does): either names rank 2.
  StopOneRankMidRun(SIGKILL, "rank 2");
}

// SIGTERM to `train --nproc-per-node` (or Ctrl-C) becomes SIGUSR1 to
// mpirun, which forwards it to every rank: they agree on a step, save one
// checkpoint and exit cleanly, and it resumes.
TEST(TrainDataParallel, SigtermSavesOneCoordinatedCheckpointAndExits) {
  ScratchDir dir("tierflow-dp-sigterm-");
  const std::string out = dir / "out";
  std::vector<std::string> args = WithRanks(2, TrainArgs(out, 1, 100000));
  args.insert(args.end(), {"--log-every", "1"});
  const pid_t job = testing_common::SpawnLogged(TIERFLOW_BINARY, args, dir / "log");
  ASSERT_GT(job, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         ReadWholeFile(dir / "log").find("step 3/") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(::kill(job, SIGTERM), 0);
  const int code = testing_common::WaitExitCode(job);
  const std::string log = ReadWholeFile(dir / "log");
  EXPECT_EQ(code, 0) << log;
  EXPECT_NE(log.find("stopped by SIGUSR1"), std::string::npos) << log;
  int saved = 0;
  for (const auto& entry : fs::directory_iterator(out + "/checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0) saved = std::max(saved, std::atoi(name.c_str() + 5));
  }
  ASSERT_GE(saved, 3) << log;
  args = TrainArgs(out, 2, saved + 1);
  args.push_back("--resume");
  std::string resumed;
  EXPECT_EQ(RunCommand(TIERFLOW_BINARY, args, dir / "resume.log", &resumed), 0) << resumed;
}

// A second run on the same --out is refused by the lock and leaves the
// first alone: the second's ranks beat into (and on exit remove) files of
// the same names, and the first must not take its own ranks for dead (each
// rank rewrites its file every period, so a removed beat comes back).
TEST(TrainDataParallel, ASecondRunOnTheSameOutLeavesTheFirstRunning) {
  ScratchDir dir("tierflow-dp-twice-");
  const std::string out = dir / "out";
  std::vector<std::string> args = WithRanks(2, TrainArgs(out, 1, 100000));
  args.insert(args.end(), {"--log-every", "1", "--rank-timeout", "2"});
  const pid_t first = testing_common::SpawnLogged(TIERFLOW_BINARY, args, dir / "first.log");
  ASSERT_GT(first, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         ReadWholeFile(dir / "first.log").find("step 2/") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string log;
  EXPECT_NE(
      RunCommand(TIERFLOW_BINARY, WithRanks(2, TrainArgs(out, 1, 5)), dir / "second.log", &log), 0);
  EXPECT_NE(log.find("tierflow train"), std::string::npos) << log;  // refused by the lock
  // Longer than the first run's rank timeout: it would have aborted by now.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_EQ(::kill(first, SIGTERM), 0);
  const int code = testing_common::WaitExitCode(first);
  log = ReadWholeFile(dir / "first.log");
  EXPECT_EQ(code, 0) << log;
  EXPECT_EQ(log.find("has not been heard from"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped by SIGUSR1"), std::string::npos) << log;
}

std::vector<std::string> OnNvme(std::vector<std::string> args, const std::string& path) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--offload-optimizer") args[i + 1] = "nvme";
  }
  args.insert(args.end(), {"--nvme-path", path, "--nvme-buffered"});
  return args;
}

// A swap set as an interrupted run leaves it in `nvme`: a swap file and an
// unheld lock. Returns its directory.
// The set an interrupted run of OUT left: its owner record names OUT, so
// OUT's next run may remove it.
std::string PlantStaleSet(const std::string& nvme, const std::string& run_id,
                          const std::string& out) {
  const std::string set = nvme + "/tierflow-swap/" + run_id;
  fs::create_directories(out);
  fs::create_directories(set);
  std::ofstream(set + "/lock") << "";
  std::ofstream(set + "/state-0.swap") << "an interrupted run's swap file";
  std::ofstream(set + "/" + offload::kSwapSetOwnerFile) << OwnerRecordForOutputDir(out);
  return set;
}

// Parameter offload across ranks: every rank streams the same blocks from a
// whole copy of its own on NVMe (a swap set per rank, recorded in OUT), bit
// for bit one process accumulating; a stale streamed-weights set an earlier
// run of OUT left is removed with its run's entry.
TEST(TrainDataParallel, StreamedWeightsAcrossRanksAreOneProcessBitForBit) {
  ScratchDir dir("tierflow-dp-params-");
  std::string log;
  const std::string one = dir / "one", many = dir / "many", nvme = dir / "nvme-many";
  const std::string stale = PlantStaleSet(nvme, "run-old-params", many);
  fs::create_directories(many);
  std::ofstream(many + "/swap_runs.json")
      << nlohmann::json::array({{{"run_id", "run-old"}, {"paths", {nvme}}}}).dump();
  auto streamed = [](std::vector<std::string> args, const std::string& path) {
    args.insert(args.end(), {"--offload-param", "nvme", "--nvme-path", path, "--nvme-buffered"});
    return args;
  };
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, streamed(TrainArgs(one, 2, 3), dir / "nvme-one"),
                       one + ".log", &log),
            0)
      << log;
  std::vector<std::string> two = WithRanks(2, streamed(TrainArgs(many, 1, 3), nvme));
  two.insert(two.end(), {"--checkpoint-every", "2"});
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, two, many + ".log", &log), 0) << log;
  EXPECT_NE(log.find("streamed from NVMe"), std::string::npos) << log;
  ASSERT_EQ(Curve(one).size(), 3u);
  EXPECT_EQ(Curve(one), Curve(many));
  EXPECT_EQ(ReadWholeFile(many + "/model/model.safetensors"),
            ReadWholeFile(one + "/model/model.safetensors"));
  EXPECT_NE(log.find("removed stale swap set " + stale), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(stale));
  const nlohmann::json runs = nlohmann::json::parse(ReadWholeFile(many + "/swap_runs.json"));
  ASSERT_EQ(runs.size(), 2u) << runs.dump();
  EXPECT_NE(runs[0]["run_id"].get<std::string>().find("-rank0"), std::string::npos);
  EXPECT_NE(runs[1]["run_id"].get<std::string>().find("-rank1"), std::string::npos);

  // Step 3 again from the 2-rank checkpoint of step 2, on 1 process: each
  // copy is rebuilt from the loaded master weights.
  const std::string resumed = dir / "resumed";
  fs::create_directories(resumed + "/checkpoints");
  fs::copy(many + "/checkpoints/step-00000002", resumed + "/checkpoints/step-00000002",
           fs::copy_options::recursive);
  std::vector<std::string> resume = streamed(TrainArgs(resumed, 2, 3), dir / "nvme-resumed");
  resume.push_back("--resume");
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, resume, resumed + ".log", &log), 0) << log;
  EXPECT_EQ(Curve(resumed), std::vector<std::string>{Curve(one).back()});
  EXPECT_EQ(ReadWholeFile(resumed + "/model/model.safetensors"),
            ReadWholeFile(one + "/model/model.safetensors"));
}

// Optimizer state on NVMe: each rank keeps its part in a swap set of its
// own (in the same directory), bit-identical to one process, and resumes
// from its checkpoint so; rank 0 keeps OUT's record of the sets, and the
// run removes the stale set an earlier run of OUT left on this host while
// keeping another host's entry.
TEST(TrainDataParallel, StateOnNvmeAcrossRanksIsOneProcessBitForBit) {
  ScratchDir dir("tierflow-dp-nvme-");
  std::string log;
  const std::string one = dir / "one", many = dir / "many", nvme = dir / "nvme-many";
  const std::string stale = PlantStaleSet(nvme, "run-old", many);
  fs::create_directories(many);
  std::ofstream(many + "/swap_runs.json")
      << nlohmann::json::array({{{"run_id", "run-old"}, {"paths", {nvme}}},
                                {{"run_id", "run-elsewhere"},
                                 {"paths", {"/nvme-of-another-host"}},
                                 {"host", "another-host"}}})
             .dump();
  std::vector<std::string> whole = OnNvme(TrainArgs(one, 2, 5), dir / "nvme-one");
  whole.insert(whole.end(), {"--checkpoint-every", "3"});
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, whole, one + ".log", &log), 0) << log;
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, WithRanks(2, OnNvme(TrainArgs(many, 1, 3), nvme)),
                       many + ".log", &log),
            0)
      << log;
  EXPECT_NE(log.find("optimizer state: NVMe"), std::string::npos) << log;
  std::vector<std::string> curve = Curve(one);
  ASSERT_EQ(curve.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(curve.begin(), curve.begin() + 3), Curve(many));
  ExpectSameCheckpointFiles(one + "/checkpoints/step-00000003",
                            many + "/checkpoints/step-00000003");
  EXPECT_NE(log.find("removed stale swap set " + stale), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(stale));
  const nlohmann::json runs = nlohmann::json::parse(ReadWholeFile(many + "/swap_runs.json"));
  std::vector<std::string> ids;
  for (const nlohmann::json& r : runs) ids.push_back(r["run_id"]);
  ASSERT_EQ(ids.size(), 3u) << runs.dump();
  EXPECT_EQ(ids[0], "run-elsewhere");
  EXPECT_NE(ids[1].find("-rank0"), std::string::npos) << ids[1];
  EXPECT_NE(ids[2].find("-rank1"), std::string::npos) << ids[2];
  EXPECT_EQ(runs[1]["host"], runs[2]["host"]);

  // Steps 4-5 from the 2-rank checkpoint, state loaded into each rank's set.
  const std::string resumed = dir / "resumed";
  fs::create_directories(resumed + "/checkpoints");
  fs::copy(many + "/checkpoints/step-00000003", resumed + "/checkpoints/step-00000003",
           fs::copy_options::recursive);
  std::vector<std::string> resume = WithRanks(2, OnNvme(TrainArgs(resumed, 1, 5), nvme));
  resume.push_back("--resume");
  ASSERT_EQ(RunCommand(TIERFLOW_BINARY, resume, resumed + ".log", &log), 0) << log;
  EXPECT_EQ(ReadWholeFile(resumed + "/model/model.safetensors"),
            ReadWholeFile(one + "/model/model.safetensors"));
  EXPECT_EQ(Curve(resumed), std::vector<std::string>(curve.begin() + 3, curve.end()));
}

}  // namespace
}  // namespace tierflow

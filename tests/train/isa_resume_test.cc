// The instruction-set level (common/cpu_isa.h) through the `tierflow` binary:
// a checkpoint written at one level resumes bit-exactly at every other, and
// every level trains to the same weights; a TIERFLOW_ISA that is unknown, or
// names a level this CPU cannot run, stops the command at start-up with exit
// status 2 and the reason (never an illegal instruction later).
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/cpu_isa.h"
#include "tests/common/scratch_dir.h"
#include "tests/common/spawn.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_common::ReadWholeFile;
using testing_common::ScratchDir;

// Runs `tierflow args...` with TIERFLOW_ISA=level (unset when empty); returns
// the exit status, the output in *log_text.
int RunAt(const std::string& level, const std::vector<std::string>& args, const std::string& log,
          std::string* log_text) {
  if (level.empty()) {
    unsetenv("TIERFLOW_ISA");
  } else {
    setenv("TIERFLOW_ISA", level.c_str(), 1);
  }
  const pid_t pid = testing_common::SpawnLogged(TIERFLOW_BINARY, args, log);
  unsetenv("TIERFLOW_ISA");
  EXPECT_GT(pid, 0);
  const int code = testing_common::WaitExitCode(pid);
  *log_text = ReadWholeFile(log);
  return code;
}

// Six steps of a tiny model on the CPU device, a checkpoint every 3 steps,
// the optimizer state on the host tier.
std::vector<std::string> TrainArgs(const std::string& out) {
  return {"train", "--model",      "tiny-llama", "--steps",      "6",   "--micro-batch",
          "2",     "--seq-len",    "32",         "--grad-accum", "2",   "--checkpoint-every",
          "3",     "--eval-every", "0",          "--device",     "cpu", "--offload-optimizer",
          "host",  "--out",        out};
}

TEST(IsaResume, CheckpointFromOneLevelResumesBitExactlyAtEveryOther) {
  const std::vector<Isa> levels = SupportedIsas();
  const std::string best(IsaName(levels.back()));
  ScratchDir dir("tierflow-isa-resume-");
  std::string log;

  // The uninterrupted run at the best level; its step-3 checkpoint is the
  // starting point of every resumed run.
  const std::string ref = dir / "ref";
  ASSERT_EQ(RunAt(best, TrainArgs(ref), dir / "ref.log", &log), 0) << log;
  EXPECT_NE(log.find("host loops: " + best), std::string::npos) << "the run names its level:\n"
                                                                << log;
  const std::string expected = ReadWholeFile(ref + "/model/model.safetensors");
  ASSERT_FALSE(expected.empty());
  ASSERT_TRUE(fs::exists(ref + "/checkpoints/step-00000003")) << log;

  for (Isa isa : levels) {
    const std::string level(IsaName(isa));
    SCOPED_TRACE(level);
    // Uninterrupted at this level: the same weights.
    const std::string whole = dir / ("whole-" + level);
    ASSERT_EQ(RunAt(level, TrainArgs(whole), dir / ("whole-" + level + ".log"), &log), 0) << log;
    EXPECT_EQ(ReadWholeFile(whole + "/model/model.safetensors"), expected)
        << "an uninterrupted run at " << level << " ended with other weights";

    // Steps 4-6 at this level from the best level's step-3 checkpoint.
    const std::string resumed = dir / ("resumed-" + level);
    fs::create_directories(resumed + "/checkpoints");
    fs::copy(ref + "/checkpoints/step-00000003", resumed + "/checkpoints/step-00000003",
             fs::copy_options::recursive);
    std::vector<std::string> args = TrainArgs(resumed);
    args.push_back("--resume");
    ASSERT_EQ(RunAt(level, args, dir / ("resumed-" + level + ".log"), &log), 0) << log;
    EXPECT_NE(log.find("step 3"), std::string::npos) << "resumed from step 3:\n" << log;
    EXPECT_NE(log.find("host loops: " + level), std::string::npos) << log;
    EXPECT_EQ(ReadWholeFile(resumed + "/model/model.safetensors"), expected)
        << "steps 4-6 at " << level << " after steps 1-3 at " << best
        << " ended with other weights";
  }
}

TEST(IsaResume, UnknownLevelStopsAtStartUpNamingTheChoices) {
  ScratchDir dir("tierflow-isa-bad-");
  std::string log;
  EXPECT_EQ(RunAt("avx9", TrainArgs(dir / "out"), dir / "log", &log), 2) << log;
  EXPECT_NE(log.find("TIERFLOW_ISA=avx9"), std::string::npos) << log;
  EXPECT_NE(log.find("baseline, avx2, avx512"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "out")) << "nothing ran";
}

TEST(IsaResume, LevelTheCpuLacksStopsAtStartUpNamingWhatItHas) {
  if (CpuSupportsIsa(Isa::kAvx512)) GTEST_SKIP() << "this CPU runs every level";
  const std::string missing = CpuSupportsIsa(Isa::kAvx2) ? "avx512" : "avx2";
  ScratchDir dir("tierflow-isa-missing-");
  std::string log;
  EXPECT_EQ(RunAt(missing, {"bench", "adam", "--params", "1Mi"}, dir / "log", &log), 2) << log;
  EXPECT_NE(log.find("cannot run the " + missing + " level"), std::string::npos) << log;
}

}  // namespace
}  // namespace tierflow

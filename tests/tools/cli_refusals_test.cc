// Issue 40's refusals through the `tierflow` binary: what used to be accepted
// and wrong (a flag of 0, -4 or NaN taken as "not given"; a config value out
// of range reported without its file and exiting 1; --help broken by a bad
// TIERFLOW_ISA; raw bytes of a path in an error or in --json output) is
// refused, or answered, clearly. A refused command line exits 2.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/run_command.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;
using testing_common::CommandOutput;
using testing_common::ScratchDir;

constexpr int kExitUsage = 2;

// `tierflow ARGS` with stderr, in `dir` (so nothing lands elsewhere).
CommandOutput Tierflow(const std::string& args, const std::string& env = "") {
  return testing_common::RunCommand(env + " " + TIERFLOW_BINARY + " " + args + " 2>&1");
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Finding 11: `plan --seq-len 0`, `--cores -4` and `--device-tflops
// nan|-1|0` were planned with the defaults; every numeric flag of every
// command is checked the same way (tools/flag_checks.h).
TEST(CliRefusals, PlanSeqLenZeroCoresNegativeAndNanTflopsAreRefusedNamingTheFlag) {
  ScratchDir dir("tierflow-cli-");
  const std::string ckpt = dir / "ckpt";
  const std::pair<std::string, std::string> cases[] = {
      {"plan --model tiny-llama --seq-len 0", "--seq-len"},
      {"plan --model tiny-llama --cores -4", "--cores"},
      {"plan --model tiny-llama --cores 0", "--cores"},
      {"plan --model tiny-llama --device-tflops nan", "--device-tflops"},
      {"plan --model tiny-llama --device-tflops -1", "--device-tflops"},
      {"plan --model tiny-llama --device-tflops 0", "--device-tflops"},
      {"plan --model tiny-llama --device-tflops inf", "--device-tflops"},
      {"plan --layers 0 --d-model 64 --heads 4", "--layers"},
      {"plan --model tiny-llama --ratio 1.5", "--ratio"},
      {"plan --model tiny-llama --ratio nan", "--ratio"},
      {"plan --model tiny-llama --micro-batch 0", "--micro-batch"},
      {"plan --model tiny-llama --buffer-count 1", "--buffer-count"},
      {"plan --model tiny-llama --nodes 0", "--nodes"},
      {"plan --model tiny-llama --network-gbps nan --nodes 2", "--network-gbps"},
      {"plan --model tiny-llama --host-memory 0", "--host-memory"},
      {"plan --model tiny-llama --sub-group 0", "--sub-group"},
      {"train --lr nan", "--lr"},
      {"train --lr -1", "--lr"},
      {"train --steps 0", "--steps"},
      {"train --seq-len 1", "--seq-len"},
      {"train --weight-decay -0.1", "--weight-decay"},
      {"train --clip inf", "--clip"},
      {"train --eval-every -1", "--eval-every"},
      {"train --trace-steps 0", "--trace-steps"},
      {"train --rank-timeout nan", "--rank-timeout"},
      {"train --seed -1", "--seed"},
      {"train --device-memory 0", "--device-memory"},
      {"bench copy --iterations 0", "--iterations"},
      {"bench copy --size 0", "--size"},
      {"bench adam --rounds nan", "--rounds"},
      {"bench nvme --path " + dir.path() + " --queue-depth 0", "--queue-depth"},
      {"bench engine --steps 0", "--steps"},
      {"bench engine --clip nan", "--clip"},
      {"bench kernels --iterations -1", "--iterations"},
      {"bench tokenizer --threads -1", "--threads"},
      {"bench comm --iterations 0", "--iterations"},
      {"bench all --copy-size 0", "--copy-size"},
      {"tier migrate " + ckpt + " --to host --block-size 0", "--block-size"},
  };
  for (const auto& [args, flag] : cases) {
    const CommandOutput r = Tierflow(args);
    EXPECT_EQ(r.exit_code, kExitUsage) << args << ":\n" << r.output;
    EXPECT_NE(r.output.find(flag + ":"), std::string::npos) << args << ":\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(ckpt)) << "nothing ran";
}

// Every numeric flag of every command carries a check: the binary refuses
// to start otherwise (tools/main.cc), so each command's help answers.
TEST(CliRefusals, EveryCommandStartsWithItsNumericFlagsChecked) {
  for (const char* command :
       {"plan", "train", "bench copy", "bench adam", "bench nvme", "bench engine", "bench all",
        "bench kernels", "bench tokenizer", "bench comm", "tier ls", "tier verify", "tier migrate",
        "tier clean", "tier export", "tokenize"}) {
    const CommandOutput r = Tierflow(std::string(command) + " --help");
    EXPECT_EQ(r.exit_code, 0) << command << ":\n" << r.output;
  }
}

// Finding 12: TIERFLOW_ISA=garbage broke --help and --version.
TEST(CliRefusals, GarbageTierflowIsaLeavesHelpAndVersionWorking) {
  const std::string env = "TIERFLOW_ISA=garbage";
  const CommandOutput help = Tierflow("--help", env);
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("Usage:"), std::string::npos) << help.output;
  const CommandOutput version = Tierflow("--version", env);
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_EQ(version.output.rfind("tierflow ", 0), 0u) << version.output;
  EXPECT_EQ(Tierflow("train --help", env).exit_code, 0);
  // A command that runs the host loops says what is wrong and which values work.
  const CommandOutput plan = Tierflow("plan --model tiny-llama", env);
  EXPECT_EQ(plan.exit_code, kExitUsage) << plan.output;
  EXPECT_NE(plan.output.find("TIERFLOW_ISA=garbage"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("baseline, avx2, avx512"), std::string::npos) << plan.output;
}

// Finding 12: a range error in a config lacked the file and JSON path, and
// exited 1 where a config that does not parse exits 2.
TEST(CliRefusals, ConfigRangeErrorsNameTheFileAndJsonPathAndExitLikeParseErrors) {
  ScratchDir dir("tierflow-cli-");
  const std::pair<std::string, std::string> cases[] = {
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": -1}}})", "optimizer.params.lr: is -1"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": -0.5}}})",
       "scheduler.params.warmup_min_lr: is -0.5"},
      {R"({"tierflow": {"eval_fraction": 1.5}})", "tierflow.eval_fraction: is 1.5"},
      {R"({"fp16": {"enabled": true, "min_loss_scale": 0}})", "fp16.min_loss_scale: is 0"},
  };
  const std::string config = dir / "ds.json";
  for (const auto& [json, where] : cases) {
    WriteFile(config, json);
    const CommandOutput r = Tierflow("train --config " + config + " --out " + (dir / "out"));
    EXPECT_EQ(r.exit_code, kExitUsage) << json << ":\n" << r.output;
    EXPECT_NE(r.output.find(config + ": " + where), std::string::npos) << json << ":\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "out")) << "nothing ran";
}

// Finding 12: raw invalid UTF-8 was echoed into errors, and a path that is
// not UTF-8 made --json output end the command as an internal error.
TEST(CliRefusals, RawInvalidUtf8IsEscapedInErrorsAndJsonOutput) {
  ScratchDir dir("tierflow-cli-");
  const std::string config = dir / "bad.json";
  WriteFile(config,
            "{\"tierflow\": {\"st\xff"
            "eps\": 3}}");
  const CommandOutput parse = Tierflow("train --config " + config);
  EXPECT_EQ(parse.exit_code, kExitUsage) << parse.output;
  EXPECT_NE(parse.output.find("\\xff"), std::string::npos) << parse.output;
  EXPECT_EQ(parse.output.find('\xff'), std::string::npos) << parse.output;

  const CommandOutput flag = Tierflow("plan --cores \xff");
  EXPECT_EQ(flag.exit_code, kExitUsage) << flag.output;
  EXPECT_NE(flag.output.find("\\xff"), std::string::npos) << flag.output;
  EXPECT_EQ(flag.output.find('\xff'), std::string::npos) << flag.output;

  // An output directory whose name is not UTF-8, holding an interrupted checkpoint.
  const std::string out = dir / "run\xff";
  fs::create_directories(out + "/checkpoints/step-00000001");
  const CommandOutput ls =
      testing_common::RunCommand(std::string(TIERFLOW_BINARY) + " tier ls --json '" + out + "'");
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  const nlohmann::json j = nlohmann::json::parse(ls.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << ls.output;
  ASSERT_EQ(j["checkpoints"].size(), 1u) << ls.output;
  EXPECT_NE(j["checkpoints"][0]["path"].get<std::string>().find("run\\xff/checkpoints"),
            std::string::npos)
      << ls.output;
}

}  // namespace
}  // namespace tierflow

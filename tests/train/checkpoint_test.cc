// Checkpoints written by one run and damaged (or crafted) before the next:
// typed reads of trainer_state.json mean a wrong field is a reported problem
// of that checkpoint, never an exception that ends the run.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"
#include "tests/tier/tier_test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using tier_test::ReadState;
using tier_test::WriteState;

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-ckpt-") {}
};

// The tier tests' small tiny-llama run, with its state on the host tier.
TrainConfig TinyRun(const std::string& out, int64_t steps) {
  TrainConfig c = tier_test::SmallRun(out, steps);
  c.offload = OffloadPlacement::kHost;
  return c;
}

// optimizer_layout becomes an OffloadPlacement where trainer_state.json is
// read; only the names tierflow writes are accepted (not "auto", not
// DeepSpeed's "cpu", not another case).
TEST(Checkpoint, OptimizerLayoutIsParsedStrictly) {
  auto absent = ParseCheckpointLayout(nlohmann::json::object(), "t.json");
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_EQ(absent->layout, OffloadPlacement::kHost);
  auto host = ParseCheckpointLayout({{"optimizer_layout", "host"}}, "t.json");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->layout, OffloadPlacement::kHost);
  for (const char* bad : {"auto", "cpu", "NVMe", "disk"}) {
    auto r = ParseCheckpointLayout({{"optimizer_layout", bad}}, "t.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(r.status().message().find("t.json: unknown optimizer_layout"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

// An older checkpoint whose optimizer_layout was a number: retention read it
// with nlohmann's value(), which threw type_error at every later save, so the
// run aborted and the final model was never written.
TEST(Checkpoint, MistypedFieldInOlderCheckpointDoesNotAbortSave) {
  TempDir out;
  TrainReporter quiet;
  auto first = RunTraining(TinyRun(out.path(), 2), quiet);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string step2 = out / "checkpoints/step-00000002";
  const std::string step1 = out / "checkpoints/step-00000001";
  fs::copy(step2, step1, fs::copy_options::recursive);
  nlohmann::json doc = ReadState(step1);
  doc["step"] = 1;
  doc["optimizer_step"] = 1;
  doc["optimizer_layout"] = 7;
  doc["swap_set"] = "not an object";
  WriteState(step1, doc);
  const CheckpointInfo info = VerifyCheckpoint(step1);
  EXPECT_FALSE(info.verified);
  EXPECT_NE(info.problem.find("optimizer_layout must be a string, not 7"), std::string::npos)
      << info.problem;

  // A fresh run into the same directory saves step 2 again, and retention
  // reads the damaged step 1.
  fs::remove_all(out / "model");
  auto r = RunTraining(TinyRun(out.path(), 2), quiet);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(fs::exists(out / "model/model.safetensors"));
  EXPECT_TRUE(VerifyCheckpoint(step2).verified);
}

// Each mistyped field of trainer_state.json is a problem naming the field.
TEST(Checkpoint, MistypedFieldsAreReportedByName) {
  TempDir out;
  TrainReporter quiet;
  auto first = RunTraining(TinyRun(out.path(), 2), quiet);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string ckpt = out / "checkpoints/step-00000002";
  const nlohmann::json good = ReadState(ckpt);
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* want;
  };
  const Case cases[] = {
      {"step", "2", "step must be an integer"},
      {"units", 3, "units must be an array"},
      {"files", nlohmann::json::object(), "files must be an array"},
      {"version", "1", "unsupported version \"1\""},
  };
  for (const Case& c : cases) {
    nlohmann::json doc = good;
    doc[c.field] = c.value;
    WriteState(ckpt, doc);
    const CheckpointInfo info = VerifyCheckpoint(ckpt);
    EXPECT_FALSE(info.verified) << c.field;
    EXPECT_NE(info.problem.find(c.want), std::string::npos) << c.field << ": " << info.problem;
  }
  nlohmann::json doc = good;
  doc["units"][0]["name"] = nlohmann::json::array({1, 2});
  WriteState(ckpt, doc);
  EXPECT_NE(VerifyCheckpoint(ckpt).problem.find("units[0].name must be a string, not an array"),
            std::string::npos)
      << VerifyCheckpoint(ckpt).problem;
}

// A 100000-deep trainer_state.json is a DataLoss naming the file, not a
// stack overflow, and the error message does not serialize it.
TEST(Checkpoint, DeeplyNestedStateIsAnError) {
  TempDir dir;
  const std::string ckpt = dir / "step-00000001";
  fs::create_directories(ckpt);
  std::ofstream(ckpt + "/trainer_state.json")
      << "{\"format\":\"tierflow.checkpoint\",\"version\":1,\"data\":" << std::string(100000, '[')
      << std::string(100000, ']') << "}";
  auto doc = ReadCheckpointState(ckpt);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("nested deeper"), std::string::npos)
      << doc.status().ToString();
  EXPECT_LT(doc.status().message().size(), 1000u);
  EXPECT_FALSE(VerifyCheckpoint(ckpt).verified);
}

}  // namespace
}  // namespace tierflow

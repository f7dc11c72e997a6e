// trainer_state.json's checksum and its one validator (checkpoint/trainer_state.h),
// which `tier verify` and resume share: issue 40's finding 3 ("step": -5
// passed verify and resume trained from step -4; "epoch": 2^40 and
// "optimizer_step": 2^62 were accepted; "scale": 1e300 verified although
// resume refused it), and finding 9's absolute-path check (a swap directory
// under ~/.cache was refused after the state had moved there).
#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/trainer_state.h"
#include "common/path_component.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

using testing_common::ReadWholeFile;
using testing_common::ScratchDir;

CheckpointState SomeState() {
  CheckpointState s;
  s.step = 12;
  s.optimizer_step = 11;
  s.scaler = {65536.0f, 3, 2};
  s.data_state = {{"format", "tierflow.data_loader"}, {"epoch", 1}, {"index", 40}};
  s.loss = 2.25;
  s.model = "tiny-llama";
  s.world_size = 2;
  s.sequences_per_step = 8;
  return s;
}

nlohmann::json SomeDocument() {
  nlohmann::json doc = NewTrainerStateDocument(SomeState());
  doc["units"] = nlohmann::json::array();
  doc["files"] = nlohmann::json::array();
  return doc;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good());
}

TEST(TrainerState, SealedStateReadsBackAsWritten) {
  ScratchDir dir;
  Write(dir / "trainer_state.json", SealTrainerState(SomeDocument()));
  auto doc = ReadCheckpointState(dir.path());
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ((*doc)["version"], 2);
  auto state = ParseTrainerState(*doc, "t.json");
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  const CheckpointState want = SomeState();
  EXPECT_EQ(state->step, want.step);
  EXPECT_EQ(state->optimizer_step, want.optimizer_step);
  EXPECT_EQ(state->scaler.scale, want.scaler.scale);
  EXPECT_EQ(state->scaler.good_steps, want.scaler.good_steps);
  EXPECT_EQ(state->scaler.hysteresis_left, want.scaler.hysteresis_left);
  EXPECT_EQ(state->data_state, want.data_state);
  EXPECT_EQ(state->loss, want.loss);
  EXPECT_EQ(state->model, want.model);
  EXPECT_EQ(state->world_size, want.world_size);
  EXPECT_EQ(state->sequences_per_step, want.sequences_per_step);
}

// Any change of any value is caught, even one that keeps the file valid JSON
// with in-range values (a bit flipped by the disk, or a hand edit).
TEST(TrainerState, AnEditWithoutItsChecksumIsCorrupt) {
  ScratchDir dir;
  std::string text = SealTrainerState(SomeDocument());
  const size_t at = text.find("\"step\": 12");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 10, "\"step\": 13");
  Write(dir / "trainer_state.json", text);
  auto doc = ReadCheckpointState(dir.path());
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(doc.status().message().find("CRC32C mismatch"), std::string::npos)
      << doc.status().message();
  EXPECT_NE(doc.status().message().find("trainer_state.json"), std::string::npos);

  // Whitespace is not a change: the checksum covers the values.
  nlohmann::json reparsed = nlohmann::json::parse(SealTrainerState(SomeDocument()));
  Write(dir / "trainer_state.json", reparsed.dump(8));
  EXPECT_TRUE(ReadCheckpointState(dir.path()).ok());
}

// A version-2 file without its checksum is not one tierflow wrote.
TEST(TrainerState, VersionTwoWithoutAChecksumIsRefused) {
  ScratchDir dir;
  nlohmann::json doc = SomeDocument();
  doc["version"] = 2;
  Write(dir / "trainer_state.json", doc.dump(2));
  auto read = ReadCheckpointState(dir.path());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("crc32c"), std::string::npos) << read.status().message();
}

// Checkpoints written before the checksum (version 1) still resume; their
// fields go through the same validator.
TEST(TrainerState, VersionOneIsReadAndValidatedTheSame) {
  ScratchDir dir;
  nlohmann::json doc = SomeDocument();
  doc["version"] = 1;
  Write(dir / "trainer_state.json", doc.dump(2));
  auto read = ReadCheckpointState(dir.path());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(ParseTrainerState(*read, "t.json").ok());
  doc["step"] = -5;
  Write(dir / "trainer_state.json", doc.dump(2));
  read = ReadCheckpointState(dir.path());
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(ParseTrainerState(*read, "t.json").ok());
}

// Finding 3, as a class: every counter out of what tierflow writes is a
// DataLoss naming the file, the field and the value.
TEST(TrainerState, OutOfRangeFieldsAreRefusedByName) {
  struct Case {
    std::string name;
    nlohmann::json (*edit)(nlohmann::json);
    std::string want;
  };
  const Case cases[] = {
      {"negative step",
       [](nlohmann::json d) {
         d["step"] = -5;
         return d;
       },
       "step is -5"},
      {"step past 2^40",
       [](nlohmann::json d) {
         d["step"] = int64_t{1} << 41;
         return d;
       },
       "step is"},
      {"optimizer_step 2^62",
       [](nlohmann::json d) {
         d["optimizer_step"] = int64_t{1} << 62;
         return d;
       },
       "optimizer_step is"},
      {"optimizer_step past step",
       [](nlohmann::json d) {
         d["optimizer_step"] = 13;
         return d;
       },
       "optimizer_step is 13"},
      {"negative optimizer_step",
       [](nlohmann::json d) {
         d["optimizer_step"] = -1;
         return d;
       },
       "optimizer_step is -1"},
      {"epoch 2^40",
       [](nlohmann::json d) {
         d["data"]["epoch"] = int64_t{1} << 40;
         return d;
       },
       "epoch is"},
      {"negative index",
       [](nlohmann::json d) {
         d["data"]["index"] = -3;
         return d;
       },
       "index is -3"},
      {"data not an object",
       [](nlohmann::json d) {
         d["data"] = 7;
         return d;
       },
       "data must be an object"},
      {"scale 1e300",
       [](nlohmann::json d) {
         d["loss_scaler"]["scale"] = 1e300;
         return d;
       },
       "scale is"},
      {"zero scale",
       [](nlohmann::json d) {
         d["loss_scaler"]["scale"] = 0;
         return d;
       },
       "scale is 0"},
      {"negative good_steps",
       [](nlohmann::json d) {
         d["loss_scaler"]["good_steps"] = -1;
         return d;
       },
       "good_steps is -1"},
      {"hysteresis past int32",
       [](nlohmann::json d) {
         d["loss_scaler"]["hysteresis_left"] = int64_t{1} << 33;
         return d;
       },
       "hysteresis_left is"},
      {"world_size 0",
       [](nlohmann::json d) {
         d["world_size"] = 0;
         return d;
       },
       "world_size is 0"},
      {"sequences_per_step 2^50",
       [](nlohmann::json d) {
         d["sequences_per_step"] = int64_t{1} << 50;
         return d;
       },
       "sequences_per_step is"},
      {"huge model name",
       [](nlohmann::json d) {
         d["model"] = std::string(5000, 'm');
         return d;
       },
       "model"},
      {"loss as text",
       [](nlohmann::json d) {
         d["loss"] = "low";
         return d;
       },
       "loss must be a number"},
  };
  for (const Case& c : cases) {
    auto r = ParseTrainerState(c.edit(SomeDocument()), "CKPT/trainer_state.json");
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << c.name;
    EXPECT_NE(r.status().message().find("CKPT/trainer_state.json"), std::string::npos)
        << c.name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().message();
  }
}

TEST(TrainerState, ANonFiniteLossIsWrittenAsNullAndReadAsNaN) {
  CheckpointState s = SomeState();
  s.loss = std::nan("");
  nlohmann::json doc = NewTrainerStateDocument(s);
  EXPECT_TRUE(doc["loss"].is_null());
  auto r = ParseTrainerState(doc, "t.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::isnan(r->loss));
}

// Finding 9: a swap directory under a directory whose name starts with '.'
// (~/.cache/x) is a path the file system accepts, so the checkpoint that
// names it is readable; '.' and '..' components and relative paths are not.
TEST(TrainerState, SwapDirectoriesAcceptEveryNameButDotAndDotDot) {
  auto layout_with = [](const std::string& dir) {
    return ParseCheckpointLayout({{"optimizer_layout", "nvme"},
                                  {"swap_set", {{"run_id", "ckpt-1"}, {"directories", {dir}}}}},
                                 "t.json");
  };
  for (const std::string ok : {"/home/u/.cache/x/tierflow-checkpoints/ckpt-1", "/mnt/.nvme/..x",
                               "/data/...", "/a b/c\td"}) {
    auto r = layout_with(ok);
    EXPECT_TRUE(r.ok()) << ok << ": " << r.status().ToString();
  }
  const std::vector<std::string> bads = {
      "relative/x",           "/a/../b", "/a/./b", "/a/b/..", "", "/" + std::string(300, 'x'),
      std::string("/a\0b", 4)};
  for (const std::string& bad : bads) {
    auto r = layout_with(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("directories[0]"), std::string::npos)
        << r.status().message();
  }
}

TEST(CheckAbsolutePath, NamesWhatIsWrong) {
  EXPECT_TRUE(CheckAbsolutePath("/", "p").ok());
  EXPECT_TRUE(CheckAbsolutePath("/x/.hidden/y/", "p").ok());
  const Status dots = CheckAbsolutePath("/x/../y", "--nvme-path");
  EXPECT_NE(dots.message().find("--nvme-path"), std::string::npos) << dots.message();
  EXPECT_NE(dots.message().find("'..'"), std::string::npos) << dots.message();
  EXPECT_NE(CheckAbsolutePath("x/y", "p").message().find("does not start with '/'"),
            std::string::npos);
  EXPECT_FALSE(CheckAbsolutePath("/" + std::string(5000, 'a'), "p").ok());
}

}  // namespace
}  // namespace tierflow

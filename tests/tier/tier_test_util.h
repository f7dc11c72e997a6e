// Shared pieces of the tier tests: temporary directories, byte flips, and a
// small real training output directory (made once per test binary).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"

#include "checkpoint/trainer_state.h"
#include "tier/tier_migrate.h"
#include "train/trainer.h"

namespace tierflow::tier_test {
namespace fs = std::filesystem;

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-tier-") {}
};

inline std::string ReadFile(const std::string& path) { return testing_common::ReadWholeFile(path); }

using testing_common::FlipByte;

// A tiny-llama run on the CPU device: 4 steps, checkpoints at 2 and 4.
inline TrainConfig SmallRun(const std::string& out, int64_t steps = 4) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.grad_accum = 1;
  c.steps = steps;
  c.offload = OffloadPlacement::kNvme;
  c.sub_group_size = 40000;
  c.checkpoint_every = 2;
  c.eval_every = 0;
  c.out_dir = out;
  c.device.choice = DeviceChoice::kCpu;
  c.lr = 3e-3f;
  return c;
}

// The output directory of one SmallRun, made on first use and copied per test.
inline const std::string& BaseRun() {
  static TempDir dir;  // removed at exit
  static const bool trained = [] {
    TrainReporter quiet;
    auto r = RunTraining(SmallRun(dir.path()), quiet);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok();
  }();
  EXPECT_TRUE(trained);
  return dir.path();
}

inline void CopyBaseRun(const std::string& to) {
  fs::copy(BaseRun(), to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

// OUT/checkpoints/step-NNNNNNNN of a run in `out`.
inline std::string Ckpt(const TempDir& out, int step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "checkpoints/step-%08d", step);
  return out / buf;
}

// Migration options to the NVMe layout in `nvme` (64 KiB blocks) and back.
inline tier::MigrateOptions ToNvme(const std::string& nvme) {
  tier::MigrateOptions o;
  o.to = OffloadPlacement::kNvme;
  o.nvme_paths = {nvme};
  o.block_size_bytes = 64 << 10;
  return o;
}

inline tier::MigrateOptions ToHost() {
  tier::MigrateOptions o;
  o.to = OffloadPlacement::kHost;
  return o;
}

// A checkpoint's trainer_state.json, read and rewritten (to craft damage).
inline nlohmann::json ReadState(const std::string& ckpt) {
  return nlohmann::json::parse(ReadFile(ckpt + "/trainer_state.json"));
}

// Rewritten as an attacker who knows the format would: a version-2 document
// gets a correct CRC32C, so what is tested is the validation of the crafted
// fields, not the checksum in front of it (any other version is written as
// crafted).
inline void WriteState(const std::string& ckpt, nlohmann::json doc) {
  if (doc.is_object() && doc.value("version", nlohmann::json()) == 2)
    doc["crc32c"] = TrainerStateChecksum(doc);
  std::ofstream out(ckpt + "/trainer_state.json", std::ios::trunc);
  out << doc.dump(2);
  ASSERT_TRUE(out.good());
}

}  // namespace tierflow::tier_test

// Shared pieces of the tier tests: temporary directories, byte flips, and a
// small real training output directory (made once per test binary).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

#include "train/trainer.h"

namespace tierflow::tier_test {
namespace fs = std::filesystem;

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-tier-") {}
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// A tiny-llama run on the CPU device: 4 steps, checkpoints at 2 and 4.
inline TrainConfig SmallRun(const std::string& out, int64_t steps = 4) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.grad_accum = 1;
  c.steps = steps;
  c.offload = "nvme";
  c.sub_group_size = 40000;
  c.checkpoint_every = 2;
  c.eval_every = 0;
  c.out_dir = out;
  c.device = "cpu";
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

}  // namespace tierflow::tier_test

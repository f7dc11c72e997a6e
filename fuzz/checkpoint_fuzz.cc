// Fuzz entry point for a training checkpoint's trainer_state.json, read by
// VerifyCheckpoint (which resume and ListCheckpoints call on every
// checkpoint directory, including ones a crash left half-written).
#include <filesystem>
#include <string>

#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "train/checkpoint.h"

namespace tierflow::fuzz {

void FuzzCheckpointState(std::string_view data) {
  // A checkpoint directory with one small file the state may list
  // (model/config.json, 2 bytes); the fuzzer finds its CRC32C through
  // libFuzzer's comparison hooks.
  static const std::string dir = [] {
    const std::string d = FuzzTempDir() + "/step-00000001";
    std::filesystem::create_directories(d + "/model");
    WriteFuzzFile("step-00000001/model/config.json", "{}");
    return d;
  }();
  WriteFuzzFile("step-00000001/trainer_state.json", data);
  const CheckpointInfo info = VerifyCheckpoint(dir);
  FUZZ_CHECK(info.path == dir);
  FUZZ_CHECK(info.verified == info.problem.empty());
}

}  // namespace tierflow::fuzz

// Fuzz entry point for a training checkpoint's trainer_state.json, read by
// VerifyCheckpoint (which resume and ListCheckpoints call on every
// checkpoint directory, including ones a crash left half-written) through
// the one validator resume uses too (checkpoint/trainer_state.h).
//
// An input whose first byte is 0x01 is sealed first: the rest, when it parses
// as a JSON object, gets a correct "crc32c" (version 2), so the fuzzer reaches
// the field validation behind the checksum instead of stopping at it. Any
// other input is written as it is (raw files, version 1 included).
#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/trainer_state.h"
#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "io/json_util.h"

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
  std::string text(data);
  if (!data.empty() && data.front() == '\x01') {
    nlohmann::json doc;
    text = std::string(data.substr(1));
    if (ParseJsonStrict(text, "fuzz input", &doc).ok() && doc.is_object()) {
      text = SealTrainerState(std::move(doc));
    }
  }
  WriteFuzzFile("step-00000001/trainer_state.json", text);
  const CheckpointInfo info = VerifyCheckpoint(dir);
  FUZZ_CHECK(info.path == dir);
  FUZZ_CHECK(info.verified == info.problem.empty());
  if (!info.verified) return;
  // What verify accepts, resume's validator accepts, in range.
  auto doc = ReadCheckpointState(dir);
  FUZZ_CHECK(doc.ok());
  auto state = ParseTrainerState(*doc, dir + "/trainer_state.json");
  FUZZ_CHECK(state.ok());
  FUZZ_CHECK(state->step >= 0 && state->step <= kMaxCheckpointStep);
  FUZZ_CHECK(state->optimizer_step >= 0 && state->optimizer_step <= state->step);
  FUZZ_CHECK(std::isfinite(state->scaler.scale) && state->scaler.scale > 0);
  FUZZ_CHECK(state->scaler.good_steps >= 0 && state->scaler.hysteresis_left >= 0);
  FUZZ_CHECK(state->world_size >= 1 && state->world_size <= kMaxCheckpointWorldSize);
  FUZZ_CHECK(info.step == state->step);
}

}  // namespace tierflow::fuzz

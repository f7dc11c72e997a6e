// Fuzz entry points for the safetensors header and the Hugging Face index.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"

namespace tierflow::fuzz {

void FuzzSafetensorsHeader(std::string_view data) {
  StatusOr<SafetensorsHeader> parsed = ParseSafetensorsHeader(data, "fuzz.safetensors");
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty());
    return;
  }
  const SafetensorsHeader& h = *parsed;
  // The documented contract: the header and the tensors cover the file
  // exactly, the tensors tile the data region in order, sizes agree.
  FUZZ_CHECK(h.header_num_bytes <= kSafetensorsMaxHeaderBytes);
  FUZZ_CHECK(h.data_offset_bytes() + h.data_num_bytes == data.size());
  uint64_t next_begin = 0;
  for (const SafetensorsTensorInfo& t : h.tensors) {
    FUZZ_CHECK(t.begin_bytes == next_begin);
    FUZZ_CHECK(t.end_bytes >= t.begin_bytes);
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0);
      elements *= static_cast<uint64_t>(d);
    }
    FUZZ_CHECK(elements == t.num_elements);
    FUZZ_CHECK(FindSafetensorsDType(t.dtype_name).has_value());
    FUZZ_CHECK(t.element_bytes == FindSafetensorsDType(t.dtype_name)->element_bytes);
    FUZZ_CHECK(t.num_bytes() == t.num_elements * t.element_bytes);
    FUZZ_CHECK(h.Find(t.name) == &t);
    next_begin = t.end_bytes;
  }
  FUZZ_CHECK(next_begin == h.data_num_bytes);
  FUZZ_CHECK(h.index_by_name.size() == h.tensors.size());
}

namespace {

// A sharded checkpoint (two shards, three tensors) saved once per process;
// each input then replaces its index.
const std::string& ShardedCheckpointDir() {
  static const std::string dir = [] {
    const std::string d = FuzzTempDir() + "/hf";
    FUZZ_CHECK(std::filesystem::create_directories(d));
    static const float a[4] = {1, 2, 3, 4};
    static const float b[2] = {5, 6};
    static const float c[1] = {7};
    const std::vector<SafetensorsEntry> tensors = {
        {"a", DType::kF32, {2, 2}, a}, {"b", DType::kF32, {2}, b}, {"c", DType::kF32, {}, c}};
    HfSaveOptions options;
    options.max_shard_bytes = 16;  // a (16 bytes) alone, then b and c
    const Status saved = SaveHfCheckpoint(d, tensors, "{\"model_type\": \"gpt2\"}", options);
    FUZZ_CHECK(saved.ok());
    return d;
  }();
  return dir;
}

}  // namespace

void FuzzHfIndex(std::string_view data) {
  const std::string& dir = ShardedCheckpointDir();
  WriteFuzzFile("hf/" + std::string(kHfIndexFileName), data);
  StatusOr<HfCheckpoint> opened = HfCheckpoint::Open(dir);
  if (!opened.ok()) {
    FUZZ_CHECK(!opened.status().message().empty());
    return;
  }
  // Accepted: the index's tensors are some of the shards' (an index may list
  // fewer than the shards hold: the checkpoint is then those tensors, and
  // validating against the full list names the missing one); each listed
  // tensor reads back its values.
  FUZZ_CHECK(opened->sharded());
  const std::vector<TensorSpec> specs = {{"a", {2, 2}}, {"b", {2}}, {"c", {}}};
  const std::vector<std::string> names = opened->TensorNames();
  for (const std::string& n : names) FUZZ_CHECK(n == "a" || n == "b" || n == "c");
  const bool complete = names == std::vector<std::string>({"a", "b", "c"});
  const Status valid = opened->Validate(specs);
  FUZZ_CHECK(valid.ok() == complete);
  if (!complete) FUZZ_CHECK(!valid.message().empty());
  const float expected[3][4] = {{1, 2, 3, 4}, {5, 6}, {7}};
  for (size_t i = 0; i < specs.size(); ++i) {
    if (std::find(names.begin(), names.end(), specs[i].name) == names.end()) continue;
    float got[4] = {};
    const TensorDestination one[1] = {{specs[i], DType::kF32, got}};
    FUZZ_CHECK(opened->ReadInto(one).ok());
    FUZZ_CHECK(std::equal(got, got + 4, expected[i]));
  }
}

}  // namespace tierflow::fuzz

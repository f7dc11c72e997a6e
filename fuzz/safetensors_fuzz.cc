// Fuzz entry points for the safetensors header and the Hugging Face index.
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
  // Accepted: every tensor of the shards resolves, and reads back its values.
  FUZZ_CHECK(opened->sharded());
  const std::vector<TensorSpec> specs = {{"a", {2, 2}}, {"b", {2}}, {"c", {}}};
  FUZZ_CHECK(opened->Validate(specs).ok());
  FUZZ_CHECK(opened->TensorNames() == std::vector<std::string>({"a", "b", "c"}));
  float a[4] = {}, b[2] = {}, c[1] = {};
  const std::vector<TensorDestination> destinations = {
      {specs[0], DType::kF32, a}, {specs[1], DType::kF32, b}, {specs[2], DType::kF32, c}};
  FUZZ_CHECK(opened->ReadInto(destinations).ok());
  FUZZ_CHECK(a[0] == 1 && a[3] == 4 && b[0] == 5 && b[1] == 6 && c[0] == 7);
}

}  // namespace tierflow::fuzz

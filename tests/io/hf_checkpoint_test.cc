// Hugging Face checkpoint directories: load-save-load is bit-exact, sharded
// or not; a checkpoint that disagrees with the model's tensor list, or whose
// index disagrees with its shards, is refused naming the file and tensor; a
// save that fails part-way leaves the previous checkpoint loadable.
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "common/half.h"
#include "io/hf_checkpoint.h"
#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {

using testing_io::FaultInjectingFileSystem;
using testing_io::ReadBytes;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

constexpr char kConfig[] = R"({"model_type": "gpt2", "n_embd": 8, "n_layer": 2})";

// A small model's worth of tensors in mixed dtypes; owns the bytes.
class FakeModel {
 public:
  explicit FakeModel(uint32_t seed, std::string prefix = "") {
    Add(prefix + "wte.weight", DType::kBF16, {16, 8}, seed);
    Add(prefix + "wpe.weight", DType::kF32, {4, 8}, seed + 1);
    for (int l = 0; l < 2; ++l) {
      const std::string p = prefix + "h." + std::to_string(l) + ".";
      Add(p + "ln_1.weight", DType::kF32, {8}, seed + 10 * l + 2);
      Add(p + "attn.c_attn.weight", DType::kF16, {8, 24}, seed + 10 * l + 3);
      Add(p + "attn.c_attn.bias", DType::kBF16, {24}, seed + 10 * l + 4);
      Add(p + "mlp.c_fc.weight", DType::kBF16, {8, 32}, seed + 10 * l + 5);
    }
    Add(prefix + "ln_f.weight", DType::kF32, {8}, seed + 99);
  }

  std::vector<SafetensorsEntry> Entries() const {
    std::vector<SafetensorsEntry> es;
    for (const auto& [name, t] : tensors_) {
      (void)name;
      es.push_back(t.entry);
    }
    // Layout order, not name order: embeddings, blocks, final norm.
    std::vector<SafetensorsEntry> ordered;
    for (const std::string& n : order_) {
      for (const auto& e : es) {
        if (e.name == n) ordered.push_back(e);
      }
    }
    return ordered;
  }
  std::vector<TensorSpec> Specs() const {
    std::vector<TensorSpec> specs;
    for (const std::string& n : order_) specs.push_back({n, tensors_.at(n).entry.shape});
    return specs;
  }
  const std::vector<uint8_t>& Bytes(const std::string& name) const {
    return tensors_.at(name).bytes;
  }
  uint64_t TotalBytes() const {
    uint64_t n = 0;
    for (const auto& [name, t] : tensors_) n += t.bytes.size();
    return n;
  }

 private:
  struct Owned {
    SafetensorsEntry entry;
    std::vector<uint8_t> bytes;
  };
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, uint32_t seed) {
    Owned t;
    t.entry.name = name;
    t.entry.dtype = dtype;
    t.entry.shape = std::move(shape);
    size_t n = DTypeSize(dtype);
    for (int64_t d : t.entry.shape) n *= static_cast<size_t>(d);
    t.bytes.resize(n);
    std::mt19937 rng(seed);
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
    order_.push_back(name);
    auto [it, inserted] = tensors_.emplace(name, std::move(t));
    it->second.entry.data = it->second.bytes.data();
  }
  std::map<std::string, Owned> tensors_;
  std::vector<std::string> order_;
};

void ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const auto& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos) << "'" << n << "' not in: " << s.message();
  }
}

// Every tensor of `ckpt`, raw, as (dtype name, shape, bytes).
struct RawTensor {
  std::string dtype_name;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  bool operator==(const RawTensor&) const = default;
};
std::map<std::string, RawTensor> ReadAllRaw(const HfCheckpoint& ckpt) {
  std::map<std::string, RawTensor> out;
  for (const std::string& name : ckpt.TensorNames()) {
    HfCheckpoint::Location loc = ckpt.Find(name);
    RawTensor t{loc.tensor->dtype_name, loc.tensor->shape,
                std::vector<uint8_t>(loc.tensor->num_bytes())};
    EXPECT_TRUE(loc.file->ReadRaw(*loc.tensor, t.bytes.data(), t.bytes.size()).ok()) << name;
    out[name] = std::move(t);
  }
  return out;
}

// Entries borrowing `raw`'s bytes, for saving what was loaded.
std::vector<SafetensorsEntry> EntriesOf(const std::map<std::string, RawTensor>& raw) {
  std::vector<SafetensorsEntry> es;
  for (const auto& [name, t] : raw) {
    es.push_back({name, *FindSafetensorsDType(t.dtype_name)->dtype, t.shape, t.bytes.data()});
  }
  return es;
}

void ExpectMatchesModel(const HfCheckpoint& ckpt, const FakeModel& model) {
  auto raw = ReadAllRaw(ckpt);
  ASSERT_EQ(raw.size(), model.Specs().size());
  for (const auto& e : model.Entries()) {
    ASSERT_TRUE(raw.count(e.name)) << e.name;
    EXPECT_EQ(raw[e.name].bytes, model.Bytes(e.name)) << e.name;
    EXPECT_EQ(raw[e.name].shape, e.shape) << e.name;
    EXPECT_EQ(raw[e.name].dtype_name, SafetensorsDTypeName(e.dtype)) << e.name;
  }
}

TEST(HfCheckpoint, SaveAndLoadOneFile) {
  ScratchDir dir;
  FakeModel model(1);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig).ok());
  EXPECT_EQ(dir.List(), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(ReadBytes(dir.File("config.json")), kConfig);
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_FALSE(ckpt->sharded());
  EXPECT_TRUE(ckpt->Validate(model.Specs()).ok());
  ExpectMatchesModel(*ckpt, model);
  EXPECT_EQ(ckpt->files().front()->header().metadata.at("format"), "pt");
}

TEST(HfCheckpoint, SaveShardedWritesTheIndexAndLoadsBack) {
  ScratchDir dir;
  FakeModel model(2);
  HfSaveOptions options;
  options.max_shard_bytes = 700;
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig, options).ok());
  auto names = dir.List();
  ASSERT_GE(names.size(), 4u);  // config + index + >= 2 shards
  const std::string index_text = ReadBytes(dir.File("model.safetensors.index.json"));
  auto index = nlohmann::json::parse(index_text);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), model.TotalBytes());
  std::set<std::string> shards;
  for (auto& [tensor, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  const size_t n = shards.size();
  ASSERT_GE(n, 2u);
  for (size_t i = 0; i < n; ++i) {
    char want[64];
    std::snprintf(want, sizeof(want), "model-%05zu-of-%05zu.safetensors", i + 1, n);
    EXPECT_TRUE(shards.count(want)) << want;
  }
  EXPECT_EQ(names.size(), n + 2);
  // Shards are filled in the caller's order: the embeddings come first.
  EXPECT_EQ(
      index["weight_map"]["wte.weight"], "model-00001-of-" + [&] {
        char b[8];
        std::snprintf(b, sizeof(b), "%05zu", n);
        return std::string(b);
      }() + ".safetensors");

  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_TRUE(ckpt->sharded());
  EXPECT_EQ(ckpt->files().size(), n);
  ExpectMatchesModel(*ckpt, model);
}

TEST(HfCheckpoint, LoadSaveLoadIsBitExactAcrossShardings) {
  FakeModel model(3);
  ScratchDir a, b, c;
  ASSERT_TRUE(SaveHfCheckpoint(a.path(), model.Entries(), kConfig).ok());
  auto first = HfCheckpoint::Open(a.path());
  ASSERT_TRUE(first.ok());
  auto raw1 = ReadAllRaw(*first);

  HfSaveOptions sharded;
  sharded.max_shard_bytes = 300;
  ASSERT_TRUE(SaveHfCheckpoint(b.path(), EntriesOf(raw1), kConfig, sharded).ok());
  auto second = HfCheckpoint::Open(b.path());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE(second->sharded());
  auto raw2 = ReadAllRaw(*second);
  EXPECT_EQ(raw1, raw2);

  ASSERT_TRUE(SaveHfCheckpoint(c.path(), EntriesOf(raw2), kConfig).ok());
  auto third = HfCheckpoint::Open(c.path());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(raw1, ReadAllRaw(*third));
  // Unsharded saves of the same tensors are the same bytes.
  EXPECT_EQ(ReadBytes(a.File("model.safetensors")), ReadBytes(c.File("model.safetensors")));
}

TEST(HfCheckpoint, ReadIntoConvertsIntoCallerBuffers) {
  ScratchDir dir;
  FakeModel model(4);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig).ok());
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  // One flat fp32 buffer for layer 0, as an engine would lay it out.
  const auto specs = model.Specs();
  std::vector<TensorDestination> dests;
  size_t total = 0;
  for (const auto& s : specs) {
    if (s.name.rfind("h.0.", 0) != 0) continue;
    size_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<size_t>(d);
    dests.push_back({s, DType::kF32, reinterpret_cast<void*>(total)});  // offset for now
    total += n;
  }
  std::vector<float> flat(total);
  for (auto& d : dests) d.data = flat.data() + reinterpret_cast<size_t>(d.data);
  ASSERT_TRUE(ckpt->ReadInto(dests).ok());

  // c_attn.weight is stored as F16: each float must be the exact widening.
  for (const auto& d : dests) {
    const auto& bytes = model.Bytes(d.spec.name);
    const float* got = static_cast<const float*>(d.data);
    const DType stored = ckpt->Find(d.spec.name).tensor->dtype.value();
    for (size_t i = 0; i < bytes.size() / DTypeSize(stored); ++i) {
      float want;
      uint16_t h;
      if (stored == DType::kF32) {
        std::memcpy(&want, bytes.data() + 4 * i, 4);
      } else {
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        want = stored == DType::kBF16 ? Bf16ToFloat(bf16{h}) : Fp16ToFloat(fp16{h});
      }
      ASSERT_EQ(FloatBits(got[i]), FloatBits(want)) << d.spec.name << "[" << i << "]";
    }
  }
}

TEST(HfCheckpoint, MissingTensorTheModelNeedsIsNotFound) {
  ScratchDir dir;
  FakeModel model(5);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig).ok());
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  auto specs = model.Specs();
  specs.push_back({"h.2.ln_1.weight", {8}});
  ExpectError(ckpt->Validate(specs), StatusCode::kNotFound,
              {"'h.2.ln_1.weight'", dir.File("model.safetensors")});
  // ReadInto checks everything before writing anything.
  std::vector<float> buf(8, 42.0f);
  std::vector<TensorDestination> dests = {{{"ln_f.weight", {8}}, DType::kF32, buf.data()},
                                          {{"lm_head.weight", {16, 8}}, DType::kF32, nullptr}};
  ExpectError(ckpt->ReadInto(dests), StatusCode::kNotFound, {"'lm_head.weight'"});
  EXPECT_EQ(buf, std::vector<float>(8, 42.0f));
}

TEST(HfCheckpoint, WrongShapeNamesTheFileTensorAndBothShapes) {
  ScratchDir dir;
  FakeModel model(6);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig).ok());
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<TensorSpec> specs = {{"h.1.attn.c_attn.weight", {24, 8}}};
  ExpectError(ckpt->Validate(specs), StatusCode::kInvalidArgument,
              {"'h.1.attn.c_attn.weight'", dir.File("model.safetensors"), "[8, 24]", "[24, 8]"});
}

TEST(HfCheckpoint, ValidateListsSeveralProblemsAtOnce) {
  ScratchDir dir;
  FakeModel model(7);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig).ok());
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<TensorSpec> specs = {{"x", {1}}, {"ln_f.weight", {9}}};
  ExpectError(ckpt->Validate(specs), StatusCode::kNotFound, {"2 tensors", "'x'", "'ln_f.weight'"});
}

TEST(HfCheckpoint, AlternativePrefixesMatchGpt2NameVariants) {
  ScratchDir dir;
  FakeModel prefixed(8, "transformer.");
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), prefixed.Entries(), kConfig).ok());
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  FakeModel bare(8);
  TensorNameOptions names;
  EXPECT_EQ(ckpt->Validate(bare.Specs(), names).code(), StatusCode::kNotFound);
  names.alternative_prefixes = {"transformer."};
  EXPECT_TRUE(ckpt->Validate(bare.Specs(), names).ok());
  auto loc = ckpt->Resolve({"wpe.weight", {4, 8}}, names);
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->tensor->name, "transformer.wpe.weight");

  // And the other way round: specs with the prefix, a file without.
  ScratchDir dir2;
  ASSERT_TRUE(SaveHfCheckpoint(dir2.path(), bare.Entries(), kConfig).ok());
  auto ckpt2 = HfCheckpoint::Open(dir2.path());
  ASSERT_TRUE(ckpt2.ok());
  EXPECT_TRUE(ckpt2->Validate(prefixed.Specs(), names).ok());
}

TEST(HfCheckpoint, DirectoryWithoutWeightsIsNotFound) {
  ScratchDir dir;
  WriteBytes(dir.File("config.json"), kConfig);
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kNotFound, {dir.path(), "model.safetensors"});
  auto missing = HfCheckpoint::Open(dir.File("nope"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Issue 18: loading and saving loops check for cancellation per tensor and
// per shard, so SIGTERM during `train` setup or the final save stops them.
TEST(HfCheckpoint, APendingCancelStopsReadingAndSavingWithAborted) {
  ScratchDir dir;
  FakeModel model(5);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), model.Entries(), kConfig).ok());
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<float> buf(8);
  std::vector<TensorDestination> dests = {{{"ln_f.weight", {8}}, DType::kF32, buf.data()}};
  ResetCancelForTesting();
  RequestCancel(SIGTERM);
  Status read = ckpt->ReadInto(dests);
  HfSaveOptions sharded;
  sharded.max_shard_bytes = 700;
  Status save_one = SaveHfCheckpoint(dir.File("again"), model.Entries(), kConfig);
  Status save_sharded = SaveHfCheckpoint(dir.File("again2"), model.Entries(), kConfig, sharded);
  ResetCancelForTesting();
  EXPECT_EQ(read.code(), StatusCode::kAborted) << read.ToString();
  EXPECT_EQ(save_one.code(), StatusCode::kAborted) << save_one.ToString();
  EXPECT_EQ(save_sharded.code(), StatusCode::kAborted) << save_sharded.ToString();
  EXPECT_NE(save_one.message().find("interrupted by SIGTERM while saving checkpoint"),
            std::string::npos)
      << save_one.message();
  EXPECT_TRUE(ckpt->ReadInto(dests).ok());
}

// ---- sharded checkpoints whose index disagrees with the shards ----

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HfSaveOptions options;
    options.max_shard_bytes = 700;
    ASSERT_TRUE(SaveHfCheckpoint(dir_.path(), model_.Entries(), kConfig, options).ok());
    index_ = nlohmann::json::parse(ReadBytes(IndexPath()));
  }
  std::string IndexPath() const { return dir_.File("model.safetensors.index.json"); }
  void WriteIndex() { WriteBytes(IndexPath(), index_.dump()); }
  std::string ShardOf(const std::string& tensor) { return index_["weight_map"][tensor]; }

  ScratchDir dir_;
  FakeModel model_{11};
  nlohmann::json index_;
};

TEST_F(ShardedCheckpointTest, IndexNamingAMissingShardIsNotFound) {
  const std::string shard = ShardOf("ln_f.weight");
  ASSERT_EQ(::unlink(dir_.File(shard).c_str()), 0);
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kNotFound, {IndexPath(), dir_.File(shard), "'"});
}

TEST_F(ShardedCheckpointTest, IndexNamingATensorAbsentFromItsShardIsDataLoss) {
  index_["weight_map"]["h.9.ghost.weight"] = ShardOf("wte.weight");
  WriteIndex();
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss,
              {IndexPath(), "'h.9.ghost.weight'", dir_.File(ShardOf("wte.weight"))});
}

TEST_F(ShardedCheckpointTest, ShardHoldingATensorTheIndexPutsElsewhereIsDataLoss) {
  // The index maps wte.weight to the first shard; the last shard is
  // rewritten to hold a copy too (same save id), so one tensor is in two files.
  const std::string s1 = ShardOf("wte.weight");
  const std::string s_last = ShardOf("ln_f.weight");
  ASSERT_NE(s1, s_last);
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<SafetensorsEntry> es;
  std::map<std::string, std::vector<uint8_t>> keep;
  const SafetensorsReader* last = nullptr;
  for (const auto& f : ckpt->files()) {
    if (f->path() == dir_.File(s_last)) last = f.get();
  }
  ASSERT_NE(last, nullptr);
  for (const auto& t : last->header().tensors) {
    keep[t.name].resize(t.num_bytes());
    ASSERT_TRUE(last->ReadRaw(t, keep[t.name].data(), t.num_bytes()).ok());
    es.push_back({t.name, *t.dtype, t.shape, keep[t.name].data()});
  }
  es.push_back({"wte.weight", DType::kBF16, {16, 8}, model_.Bytes("wte.weight").data()});
  ASSERT_TRUE(WriteSafetensors(dir_.File(s_last), es, last->header().metadata).ok());
  auto reopened = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(reopened.ok());
  ExpectError(reopened.status(), StatusCode::kDataLoss,
              {"'wte.weight'", "both", dir_.File(s1), dir_.File(s_last)});
}

TEST_F(ShardedCheckpointTest, ShardTensorMissingFromTheIndexIsDataLoss) {
  index_["weight_map"].erase("ln_f.weight");
  WriteIndex();
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {IndexPath(), "'ln_f.weight'"});
}

TEST_F(ShardedCheckpointTest, ShardPathLeavingTheDirectoryIsRefused) {
  index_["weight_map"]["ln_f.weight"] = "../elsewhere.safetensors";
  WriteIndex();
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {IndexPath(), "\"ln_f.weight\""});
}

TEST_F(ShardedCheckpointTest, IndexWithADuplicatedTensorIsDataLoss) {
  std::string text = ReadBytes(IndexPath());
  const std::string needle = "\"weight_map\": {";
  size_t at = text.find(needle);
  ASSERT_NE(at, std::string::npos) << text;
  text.insert(at + needle.size(), "\"wte.weight\": \"" + ShardOf("wte.weight") + "\",");
  WriteBytes(IndexPath(), text);
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {IndexPath(), "wte.weight", "twice"});
}

TEST_F(ShardedCheckpointTest, IndexThatIsNotJsonIsDataLoss) {
  WriteBytes(IndexPath(), "{\"weight_map\": ");
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {IndexPath(), "JSON"});
}

// Issue 18: a 100000-deep value in the index overflowed the stack. The
// depth limit makes it a clear DataLoss naming the index.
TEST_F(ShardedCheckpointTest, DeeplyNestedIndexIsAnErrorNotAStackOverflow) {
  WriteBytes(IndexPath(), "{\"metadata\": " + std::string(100000, '[') + std::string(100000, ']') +
                              ", \"weight_map\": {}}");
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {IndexPath(), "nested deeper than 64"});
}

// A weight_map value that is a huge container is described, not serialized.
TEST_F(ShardedCheckpointTest, NonStringShardIsDescribedNotDumped) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  index_["weight_map"]["ln_f.weight"] = big;
  WriteIndex();
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {"an array of 100000 elements"});
  EXPECT_LT(ckpt.status().message().size(), 1000u);
}

TEST_F(ShardedCheckpointTest, ShardsOfTwoDifferentSavesAreDetected) {
  // A save over this checkpoint with the same shard names, torn after it
  // replaced the first shard: the old index and the old other shards remain.
  std::map<std::string, std::string> old_files;  // name -> bytes
  for (const std::string& name : dir_.List()) old_files[name] = ReadBytes(dir_.File(name));
  const std::string s1 = ShardOf("wte.weight");
  HfSaveOptions options;
  options.max_shard_bytes = 700;
  ASSERT_TRUE(SaveHfCheckpoint(dir_.path(), model_.Entries(), kConfig, options).ok());
  ASSERT_EQ(dir_.List().size(), old_files.size());
  for (const auto& [name, bytes] : old_files) {
    if (name != s1) WriteBytes(dir_.File(name), bytes);
  }
  auto ckpt = HfCheckpoint::Open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  ExpectError(ckpt.status(), StatusCode::kDataLoss, {dir_.File(s1), IndexPath(), "interrupted"});
  // With the old first shard back, the old checkpoint loads again.
  WriteBytes(dir_.File(s1), old_files[s1]);
  auto restored = HfCheckpoint::Open(dir_.path());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ExpectMatchesModel(*restored, model_);
}

// ---- saving over an existing checkpoint ----

TEST(HfCheckpointSave, FailedWriteLeavesTheOldCheckpointLoadable) {
  ScratchDir dir;
  FakeModel old_model(20), new_model(21);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), old_model.Entries(), kConfig).ok());
  const std::string old_bytes = ReadBytes(dir.File("model.safetensors"));

  for (uint64_t fail_after : {uint64_t{0}, uint64_t{7}, uint64_t{300}, uint64_t{1500}}) {
    FaultInjectingFileSystem fs;
    fs.fail_after_bytes = fail_after;
    HfSaveOptions options;
    options.fs = &fs;
    Status s = SaveHfCheckpoint(dir.path(), new_model.Entries(), R"({"v": 2})", options);
    ExpectError(s, StatusCode::kResourceExhausted, {dir.File("model.safetensors"), "full"});
    EXPECT_EQ(ReadBytes(dir.File("model.safetensors")), old_bytes) << fail_after;
    EXPECT_EQ(ReadBytes(dir.File("config.json")), kConfig);
    EXPECT_EQ(dir.List(), (std::vector<std::string>{"config.json", "model.safetensors"}))
        << "a temporary file was left behind (fail after " << fail_after << " bytes)";
    auto ckpt = HfCheckpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    ExpectMatchesModel(*ckpt, old_model);
  }
}

TEST(HfCheckpointSave, FailedShardedSaveOverASingleFileKeepsTheOldOneLoadable) {
  ScratchDir dir;
  FakeModel old_model(22), new_model(23);
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), old_model.Entries(), kConfig).ok());
  FaultInjectingFileSystem fs;
  fs.fail_after_bytes = 1000;  // past the first shard, inside the second
  HfSaveOptions options;
  options.fs = &fs;
  options.max_shard_bytes = 700;
  Status s = SaveHfCheckpoint(dir.path(), new_model.Entries(), kConfig, options);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  auto ckpt = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_FALSE(ckpt->sharded());
  ExpectMatchesModel(*ckpt, old_model);
}

TEST(HfCheckpointSave, SwitchingLayoutsRemovesTheOldFiles) {
  ScratchDir dir;
  FakeModel a(24), b(25);
  HfSaveOptions sharded;
  sharded.max_shard_bytes = 700;
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), a.Entries(), kConfig, sharded).ok());
  WriteBytes(dir.File("tokenizer.json"), "{}");  // not ours: must survive
  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), b.Entries(), kConfig).ok());
  EXPECT_EQ(dir.List(),
            (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  auto single = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(single.ok());
  ExpectMatchesModel(*single, b);

  ASSERT_TRUE(SaveHfCheckpoint(dir.path(), a.Entries(), kConfig, sharded).ok());
  for (const std::string& name : dir.List()) EXPECT_NE(name, "model.safetensors");
  auto back = HfCheckpoint::Open(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->sharded());
  ExpectMatchesModel(*back, a);
}

TEST(HfCheckpointSave, BadConfigJsonIsRefusedBeforeAnyFileIsWritten) {
  ScratchDir dir;
  FakeModel model(26);
  ExpectError(SaveHfCheckpoint(dir.path(), model.Entries(), "{\"n_layer\": "),
              StatusCode::kInvalidArgument, {"config.json", dir.path()});
  ExpectError(SaveHfCheckpoint(dir.path(), model.Entries(), "[1]"), StatusCode::kInvalidArgument,
              {"not a JSON object"});
  EXPECT_TRUE(dir.List().empty());
}

}  // namespace
}  // namespace tierflow

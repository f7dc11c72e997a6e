// Safetensors reader and writer: bit-exact round trips for F32/F16/BF16 of
// every shape kind, and each malformed-file case rejected with a DataLoss (or
// Unimplemented) error that names the file and the tensor.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "io/safetensors.h"
#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"
#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {

using testing_io::BuildFile;
using testing_io::LengthField;
using testing_io::ReadBytes;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

// Deterministic bytes for a tensor, including NaN and Inf patterns for the
// float types so "bit-exact" covers payloads a float round trip would lose.
std::vector<uint8_t> PatternBytes(size_t num_bytes, uint32_t seed) {
  std::vector<uint8_t> v(num_bytes);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  if (num_bytes >= 4) std::memcpy(v.data(), "\x01\x00\xc0\x7f", 4);  // an fp32 NaN with a payload
  return v;
}

struct OwnedTensor {
  SafetensorsEntry entry;
  std::vector<uint8_t> bytes;
};

OwnedTensor MakeTensor(std::string name, DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  OwnedTensor t;
  t.entry.name = std::move(name);
  t.entry.dtype = dtype;
  t.entry.shape = std::move(shape);
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : t.entry.shape) n *= static_cast<uint64_t>(d);
  t.bytes = PatternBytes(n, seed);
  t.entry.data = t.bytes.data();
  return t;
}

std::vector<SafetensorsEntry> Entries(const std::vector<OwnedTensor>& ts) {
  std::vector<SafetensorsEntry> es;
  for (const auto& t : ts) es.push_back(t.entry);
  return es;
}

std::vector<OwnedTensor> MixedTensors() {
  std::vector<OwnedTensor> ts;
  ts.push_back(MakeTensor("scalar.f32", DType::kF32, {}, 1));
  ts.push_back(MakeTensor("empty.bf16", DType::kBF16, {0}, 2));
  ts.push_back(MakeTensor("empty3d.f32", DType::kF32, {3, 0, 2}, 3));
  ts.push_back(MakeTensor("vec.f16", DType::kF16, {5}, 4));
  ts.push_back(MakeTensor("cube.bf16", DType::kBF16, {2, 3, 4}, 5));
  ts.push_back(MakeTensor("mat.f32", DType::kF32, {7, 3}, 6));
  ts.push_back(MakeTensor("odd.f16", DType::kF16, {3}, 7));
  return ts;
}

// The status is `code` and its message contains every one of `needles`.
void ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const auto& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos) << "'" << n << "' not in: " << s.message();
  }
}

// Opening `bytes` written to a file fails with `code`, naming the path and `needles`.
void ExpectOpenFails(const std::string& bytes, StatusCode code,
                     const std::vector<std::string>& needles) {
  ScratchDir dir;
  const std::string path = dir.File("bad.safetensors");
  WriteBytes(path, bytes);
  auto r = SafetensorsReader::Open(path);
  ASSERT_FALSE(r.ok());
  std::vector<std::string> all = needles;
  all.push_back(path);
  ExpectError(r.status(), code, all);
  // The in-memory parser (the fuzzing entry point) agrees.
  auto h = ParseSafetensorsHeader(bytes, "mem");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), code) << h.status().ToString();
}

TEST(Safetensors, RoundTripIsBitExactForEveryDTypeAndShapeKind) {
  ScratchDir dir;
  const std::string path = dir.File("m.safetensors");
  auto ts = MixedTensors();
  auto es = Entries(ts);
  ASSERT_TRUE(WriteSafetensors(path, es, {{"format", "pt"}}).ok());

  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->header().metadata.at("format"), "pt");
  ASSERT_EQ((*r)->header().tensors.size(), ts.size());
  for (const auto& t : ts) {
    const SafetensorsTensorInfo* info = (*r)->Find(t.entry.name);
    ASSERT_NE(info, nullptr) << t.entry.name;
    EXPECT_EQ(info->dtype, t.entry.dtype);
    EXPECT_EQ(info->shape, t.entry.shape);
    std::vector<uint8_t> got(info->num_bytes());
    ASSERT_TRUE((*r)->ReadRaw(*info, got.data(), got.size()).ok());
    EXPECT_EQ(got, t.bytes) << t.entry.name;
    // Same-dtype Read is the raw bytes too.
    std::vector<uint8_t> got2(info->num_bytes());
    ASSERT_TRUE((*r)->Read(t.entry.name, t.entry.dtype, got2.data(), got2.size()).ok());
    EXPECT_EQ(got2, t.bytes) << t.entry.name;
  }
  const SafetensorsTensorInfo* scalar = (*r)->Find("scalar.f32");
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->num_elements, 1u);
  EXPECT_EQ((*r)->Find("empty3d.f32")->num_elements, 0u);
}

TEST(Safetensors, LayoutIsAlignedAndDeterministic) {
  ScratchDir dir;
  auto ts = MixedTensors();
  auto es = Entries(ts);
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), es, {}).ok());
  std::reverse(es.begin(), es.end());  // input order must not matter
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), es, {}).ok());
  const std::string a = ReadBytes(dir.File("a.safetensors"));
  EXPECT_EQ(a, ReadBytes(dir.File("b.safetensors")));

  auto h = ParseSafetensorsHeader(a);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->data_offset_bytes() % 8, 0u);
  for (const auto& t : h->tensors) {
    EXPECT_EQ(t.begin_bytes % t.element_bytes, 0u) << t.name << " is misaligned";
  }
  // The padding is spaces (what the reference implementation writes).
  const std::string json = a.substr(8, h->header_num_bytes);
  EXPECT_EQ(json.front(), '{');
}

TEST(Safetensors, ReadConvertsBetweenFloatTypesWithRoundToNearestEven) {
  ScratchDir dir;
  const std::string path = dir.File("c.safetensors");
  std::vector<float> f32 = {
      1.0f,     -2.5f,    3.14159265f, 1e-8f,
      65504.0f, 70000.0f, -0.0f,       std::numeric_limits<float>::infinity()};
  std::vector<bf16> b16(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) b16[i] = FloatToBf16(f32[i] * 0.75f);
  std::vector<SafetensorsEntry> es = {
      {"f", DType::kF32, {static_cast<int64_t>(f32.size())}, f32.data()},
      {"b", DType::kBF16, {static_cast<int64_t>(b16.size())}, b16.data()}};
  ASSERT_TRUE(WriteSafetensors(path, es, {}).ok());
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  std::vector<bf16> f_as_bf16(f32.size());
  ASSERT_TRUE((*r)->Read("f", DType::kBF16, f_as_bf16.data(), f32.size() * 2).ok());
  std::vector<fp16> f_as_f16(f32.size());
  ASSERT_TRUE((*r)->Read("f", DType::kF16, f_as_f16.data(), f32.size() * 2).ok());
  std::vector<float> b_as_f32(b16.size());
  ASSERT_TRUE((*r)->Read("b", DType::kF32, b_as_f32.data(), b16.size() * 4).ok());
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(f_as_bf16[i].bits, FloatToBf16(f32[i]).bits) << i;
    EXPECT_EQ(f_as_f16[i].bits, FloatToFp16(f32[i]).bits) << i;
    EXPECT_EQ(FloatBits(b_as_f32[i]), FloatBits(Bf16ToFloat(b16[i]))) << i;
  }
  // A destination of the wrong size is refused, naming the tensor.
  ExpectError((*r)->Read("f", DType::kF32, b_as_f32.data(), 3), StatusCode::kInvalidArgument,
              {"'f'", path});
  ExpectError((*r)->Read("nope", DType::kF32, b_as_f32.data(), 4), StatusCode::kNotFound,
              {"'nope'", path});
}

TEST(Safetensors, ConversionOfALargeTensorCrossesChunkBoundaries) {
  ScratchDir dir;
  const std::string path = dir.File("big.safetensors");
  const size_t n = (size_t{1} << 20) * 2 + 12345;  // > 2 conversion chunks
  std::vector<bf16> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = bf16{static_cast<uint16_t>(i * 2654435761u >> 16)};
  std::vector<SafetensorsEntry> es = {{"w", DType::kBF16, {static_cast<int64_t>(n)}, src.data()}};
  ASSERT_TRUE(WriteSafetensors(path, es, {}).ok());
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok());
  std::vector<float> out(n);
  ASSERT_TRUE((*r)->Read("w", DType::kF32, out.data(), n * 4).ok());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(FloatBits(out[i]), FloatBits(Bf16ToFloat(src[i]))) << i;
  }
}

TEST(Safetensors, NonFloatDTypesParseButAreNotReadAsFloats) {
  const std::string json = R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  ScratchDir dir;
  const std::string path = dir.File("i.safetensors");
  WriteBytes(path, BuildFile(json, 20));
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SafetensorsTensorInfo* ids = (*r)->Find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_FALSE(ids->dtype.has_value());
  EXPECT_EQ(ids->dtype_name, "I64");
  float dst[2];
  ExpectError((*r)->Read(*ids, DType::kF32, dst, 8), StatusCode::kUnimplemented,
              {"'ids'", "I64", path});
  uint8_t raw[16];
  EXPECT_TRUE((*r)->ReadRaw(*ids, raw, 16).ok());
}

TEST(Safetensors, HeaderWithTrailingSpacesAndNoTensorsIsValid) {
  auto h = ParseSafetensorsHeader(BuildFile(R"({"__metadata__":{"a":"b"}})"
                                            "      ",
                                            0));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->tensors.empty());
  EXPECT_EQ(h->metadata.at("a"), "b");
}

TEST(Safetensors, ReaderReportsAFileTruncatedAfterOpen) {
  ScratchDir dir;
  const std::string path = dir.File("t.safetensors");
  auto t = MakeTensor("w", DType::kF32, {64}, 9);
  std::vector<SafetensorsEntry> es = {t.entry};
  ASSERT_TRUE(WriteSafetensors(path, es, {}).ok());
  auto r = SafetensorsReader::Open(path);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  std::vector<uint8_t> dst(256);
  ExpectError((*r)->ReadRaw(*(*r)->Find("w"), dst.data(), dst.size()), StatusCode::kDataLoss,
              {path, "'w'"});
}

// ---- malformed files: each case on its own ----

TEST(SafetensorsMalformed, FileShorterThanTheLengthField) {
  ExpectOpenFails("\x10\x00\x00", StatusCode::kDataLoss, {"shorter than the 8-byte"});
}

TEST(SafetensorsMalformed, EmptyFile) { ExpectOpenFails("", StatusCode::kDataLoss, {"0 bytes"}); }

TEST(SafetensorsMalformed, HeaderLengthBeyondEndOfFile) {
  ExpectOpenFails(LengthField(1000) + "{}", StatusCode::kDataLoss, {"1000", "only 10 bytes"});
}

TEST(SafetensorsMalformed, AbsurdHeaderLength) {
  ExpectOpenFails(LengthField(uint64_t{1} << 60) + "{}", StatusCode::kDataLoss,
                  {std::to_string(uint64_t{1} << 60), "limit"});
}

TEST(SafetensorsMalformed, DataShorterThanTheLastOffset) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  ExpectOpenFails(BuildFile(json, 12), StatusCode::kDataLoss, {"'w'", "past the data region"});
}

TEST(SafetensorsMalformed, HeaderIsNotJson) {
  ExpectOpenFails(BuildFile(R"({"w": {"dtype": "F32", )", 0), StatusCode::kDataLoss,
                  {"not valid JSON"});
}

// Issue 18: a 100000-deep header overflowed the stack; now DataLoss.
TEST(SafetensorsMalformed, DeeplyNestedHeaderIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ExpectOpenFails(BuildFile("{\"__metadata__\": " + deep + "}", 0), StatusCode::kDataLoss,
                  {"nested deeper than 64"});
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  ExpectOpenFails(BuildFile("{\"w\": " + objects + "}", 0), StatusCode::kDataLoss,
                  {"nested deeper than 64"});
}

// A shape of a million entries is described in the error, not serialized.
TEST(SafetensorsMalformed, HugeShapeIsDescribedNotDumped) {
  std::string shape = "[";
  for (int i = 0; i < 1000000; ++i) shape += "4294967296,";
  shape += "1]";
  ScratchDir dir;
  const std::string path = dir.File("bad.safetensors");
  WriteBytes(
      path, BuildFile(R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,0]}})", 0));
  auto r = SafetensorsReader::Open(path);
  ASSERT_FALSE(r.ok());
  ExpectError(r.status(), StatusCode::kDataLoss, {"overflows", "an array of 1000001 elements"});
  EXPECT_LT(r.status().message().size(), 1000u);
}

TEST(SafetensorsMalformed, HeaderIsNotUtf8) {
  ExpectOpenFails(BuildFile("{\"w\xff\xfe\": 1}", 0), StatusCode::kDataLoss, {"not valid JSON"});
}

TEST(SafetensorsMalformed, HeaderIsNotAnObject) {
  ExpectOpenFails(BuildFile("[1, 2, 3]", 0), StatusCode::kDataLoss, {"'{'"});
}

TEST(SafetensorsMalformed, TensorEntryIsNotAnObject) {
  ExpectOpenFails(BuildFile(R"({"w": [1, 2]})", 0), StatusCode::kDataLoss,
                  {"'w'", "not a JSON object"});
}

TEST(SafetensorsMalformed, OffsetsOutOfBounds) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[1000,1016]}})";
  ExpectOpenFails(BuildFile(json, 16), StatusCode::kDataLoss, {"'w'", "[1000,1016]"});
}

TEST(SafetensorsMalformed, OverlappingOffsets) {
  const std::string json = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                           R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  ExpectOpenFails(BuildFile(json, 24), StatusCode::kDataLoss, {"'b'", "overlap", "'a'"});
}

TEST(SafetensorsMalformed, TwoTensorsAtTheSameOffsets) {
  const std::string json = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                           R"("b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  ExpectOpenFails(BuildFile(json, 16), StatusCode::kDataLoss, {"'b'", "overlap", "'a'"});
}

TEST(SafetensorsMalformed, EndBeforeBegin) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]}})";
  ExpectOpenFails(BuildFile(json, 16), StatusCode::kDataLoss, {"'w'", "end before"});
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  const std::string json = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  ExpectOpenFails(BuildFile(json, 12), StatusCode::kDataLoss, {"'b'", "gap of 4 bytes", "'a'"});
}

TEST(SafetensorsMalformed, BytesAfterTheLastTensor) {
  const std::string json = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  ExpectOpenFails(BuildFile(json, 10), StatusCode::kDataLoss, {"cover 4", "holds 10"});
}

TEST(SafetensorsMalformed, DTypeAndShapeDisagreeWithByteSize) {
  const std::string json = R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})";
  ExpectOpenFails(BuildFile(json, 24), StatusCode::kDataLoss,
                  {"'w'", "BF16", "[2, 3]", "need 12 bytes", "span 24"});
}

TEST(SafetensorsMalformed, NegativeShapeEntry) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})";
  ExpectOpenFails(BuildFile(json, 16), StatusCode::kDataLoss, {"'w'", "-1"});
}

TEST(SafetensorsMalformed, FractionalShapeEntry) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})";
  ExpectOpenFails(BuildFile(json, 4), StatusCode::kDataLoss, {"'w'", "1.5"});
}

TEST(SafetensorsMalformed, ShapeProductOverflows) {
  const std::string json =
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})";
  ExpectOpenFails(BuildFile(json, 0), StatusCode::kDataLoss, {"'w'", "overflows"});
}

TEST(SafetensorsMalformed, ShapeTimesDTypeSizeOverflows) {
  const std::string json =
      R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})";
  ExpectOpenFails(BuildFile(json, 0), StatusCode::kDataLoss, {"'w'", "overflows"});
}

TEST(SafetensorsMalformed, UnknownDType) {
  const std::string json = R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})";
  ExpectOpenFails(BuildFile(json, 16), StatusCode::kUnimplemented, {"'w'", "F128"});
}

TEST(SafetensorsMalformed, MissingDataOffsets) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[1]}})";
  ExpectOpenFails(BuildFile(json, 4), StatusCode::kDataLoss, {"'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, DuplicateTensorNames) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  ExpectOpenFails(BuildFile(json, 8), StatusCode::kDataLoss, {"\"w\"", "twice"});
}

TEST(SafetensorsMalformed, DuplicateFieldInsideATensorEntry) {
  const std::string json =
      R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})";
  ExpectOpenFails(BuildFile(json, 4), StatusCode::kDataLoss, {"\"dtype\"", "twice", "\"w\""});
}

TEST(SafetensorsMalformed, MetadataValueIsNotAString) {
  ExpectOpenFails(BuildFile(R"({"__metadata__":{"step":5}})", 0), StatusCode::kDataLoss,
                  {"__metadata__", "step"});
}

TEST(SafetensorsMalformed, RandomCorruptionsAreRejectedOrParsedNeverCrash) {
  // What a fuzzer would do, in miniature: flip bytes of a valid file and check
  // every outcome is a clean Status (run under ASan/UBSan in CI).
  ScratchDir dir;
  auto ts = MixedTensors();
  auto es = Entries(ts);
  ASSERT_TRUE(WriteSafetensors(dir.File("v.safetensors"), es, {{"k", "v"}}).ok());
  const std::string valid = ReadBytes(dir.File("v.safetensors"));
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      // Mostly the header, where the structure is.
      size_t limit = std::min<size_t>(bytes.size(), 8 + 400);
      bytes[rng() % limit] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto h = ParseSafetensorsHeader(bytes, "fuzz");
    if (!h.ok()) {
      ++rejected;
      EXPECT_NE(h.status().message().find("fuzz"), std::string::npos) << h.status().ToString();
      continue;
    }
    // Accepted: every tensor must lie inside the data region.
    for (const auto& t : h->tensors) {
      ASSERT_LE(t.end_bytes, h->data_num_bytes);
      ASSERT_EQ(t.num_bytes(), t.num_elements * t.element_bytes);
    }
  }
  EXPECT_GT(rejected, 1000);
}

// ---- writer input checks ----

TEST(SafetensorsWriter, RejectsDuplicateNamesNegativeShapesAndNullData) {
  ScratchDir dir;
  float x[4] = {};
  std::vector<SafetensorsEntry> dup = {{"a", DType::kF32, {1}, x}, {"a", DType::kF32, {1}, x}};
  ExpectError(WriteSafetensors(dir.File("d.safetensors"), dup, {}), StatusCode::kInvalidArgument,
              {"'a'", "twice"});
  std::vector<SafetensorsEntry> neg = {{"n", DType::kF32, {-2}, x}};
  ExpectError(WriteSafetensors(dir.File("d.safetensors"), neg, {}), StatusCode::kInvalidArgument,
              {"'n'", "negative"});
  std::vector<SafetensorsEntry> null = {{"z", DType::kF32, {4}, nullptr}};
  ExpectError(WriteSafetensors(dir.File("d.safetensors"), null, {}), StatusCode::kInvalidArgument,
              {"'z'"});
  std::vector<SafetensorsEntry> meta = {{"__metadata__", DType::kF32, {1}, x}};
  ExpectError(WriteSafetensors(dir.File("d.safetensors"), meta, {}), StatusCode::kInvalidArgument,
              {"__metadata__"});
  EXPECT_TRUE(dir.List().empty()) << "a refused write must leave no file behind";
}

// A streamed tensor (fill) writes the same bytes as the same tensor borrowed,
// across several fill chunks; a failing fill names the tensor and leaves the
// old file as it was; byte ranges read back what was written.
TEST(SafetensorsWriter, StreamedTensorsAreTheBorrowedBytesAndFailuresKeepTheOldFile) {
  ScratchDir dir;
  // 2.5 chunks of fp32 plus a small bf16 tensor.
  const uint64_t n = kSafetensorsFillChunkBytes / 4 * 5 / 2 + 3;
  std::vector<float> big(n);
  for (uint64_t i = 0; i < n; ++i) big[i] = static_cast<float>(i % 1000) * 0.5f;
  std::vector<uint16_t> small = {1, 2, 3, 4, 5};
  const std::vector<SafetensorsEntry> borrowed = {
      {"big", DType::kF32, {static_cast<int64_t>(n)}, big.data()},
      {"small", DType::kBF16, {5}, small.data()}};
  int calls = 0;
  std::vector<SafetensorsEntry> streamed = borrowed;
  streamed[0].data = nullptr;
  streamed[0].fill = [&](uint64_t offset, uint64_t bytes, void* out) {
    ++calls;
    EXPECT_LE(bytes, kSafetensorsFillChunkBytes);
    EXPECT_EQ(offset % 4, 0u);
    std::memcpy(out, reinterpret_cast<const char*>(big.data()) + offset, bytes);
    return Status::Ok();
  };
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), borrowed, {{"k", "v"}}).ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), streamed, {{"k", "v"}}).ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(ReadBytes(dir.File("a.safetensors")), ReadBytes(dir.File("b.safetensors")));

  auto reader = SafetensorsReader::Open(dir.File("b.safetensors"));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const SafetensorsTensorInfo* t = (*reader)->Find("big");
  ASSERT_NE(t, nullptr);
  std::vector<float> part(100);
  ASSERT_TRUE((*reader)->ReadRawRange(*t, (n - 100) * 4, part.data(), 400).ok());
  EXPECT_EQ(0, std::memcmp(part.data(), big.data() + n - 100, 400));
  ExpectError((*reader)->ReadRawRange(*t, (n - 99) * 4, part.data(), 400),
              StatusCode::kInvalidArgument, {"'big'", "outside"});

  streamed[0].fill = [](uint64_t offset, uint64_t, void*) {
    return offset > 0 ? IoError("the disk went away") : Status::Ok();
  };
  const std::string before = ReadBytes(dir.File("b.safetensors"));
  ExpectError(WriteSafetensors(dir.File("b.safetensors"), streamed, {}), StatusCode::kIoError,
              {"tensor 'big'", "the disk went away"});
  EXPECT_EQ(ReadBytes(dir.File("b.safetensors")), before);
}

}  // namespace
}  // namespace tierflow

// The CUDA kernels of the training ops against the fast CPU paths (which are
// themselves pinned to the references), within a few units of rounding of
// the storage type; plus run-to-run bit-identity on the GPU. Skipped, with
// the reason, where no GPU is usable. Compiled again as cuda_emulation_test,
// the same cases run the same kernels on the CUDA emulator, in CI.
#include <type_traits>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "tests/kernels/ops_runners.h"

#ifdef TIERFLOW_CUDA_EMULATION
// cuda_emulation_test: the same cases on the CUDA emulator
// (device/cuda/emulator.h), under their own name, at the shapes it runs in
// seconds.
#include "tests/kernels/emulation/emulated_cuda_device.h"
#define OpsCuda OpsCudaEmulated
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

namespace tierflow {
namespace {

using namespace testing_ops;  // NOLINT: test-local helpers

// k = 4: CUDA and the CPU differ in summation order and in expf/tanhf/cosf
// rounding, then both round to T.
constexpr double kUlps = 4.0;

template <typename T>
class OpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef TIERFLOW_CUDA_EMULATION
    dev_ = MakeEmulatedCudaDevice();
    ASSERT_NE(dev_, nullptr);
    return;
#endif
    std::string why = CudaUnavailableReason();
    if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
    DeviceOptions o;
    o.kind = DeviceChoice::kCuda;
    auto d = CreateDevice(o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dev_ = std::move(d).value();
  }
  std::unique_ptr<Device> dev_;
};
using StorageTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(OpsCuda, StorageTypes);

TYPED_TEST(OpsCuda, Embedding) {
  using T = TypeParam;
  const EmbeddingShape s{.batch = 2, .seq_len = 16, .channels = 32, .vocab = 67};
  for (bool positions : {true, false}) {
    ExpectOutputsClose<T>(RunEmbedding<T>(Impl::kFast, nullptr, s, positions),
                          RunEmbedding<T>(Impl::kDevice, this->dev_.get(), s, positions), kUlps,
                          "embedding");
  }
}

TYPED_TEST(OpsCuda, LayerNorm) {
  using T = TypeParam;
  for (NormShape s :
       {NormShape{.rows = 130, .channels = 48}, NormShape{.rows = 3, .channels = 769}}) {
    ExpectOutputsClose<T>(RunLayerNorm<T>(Impl::kFast, nullptr, s),
                          RunLayerNorm<T>(Impl::kDevice, this->dev_.get(), s), kUlps, "layernorm");
  }
}

TYPED_TEST(OpsCuda, RmsNorm) {
  using T = TypeParam;
  for (NormShape s :
       {NormShape{.rows = 130, .channels = 40}, NormShape{.rows = 3, .channels = 1000}}) {
    ExpectOutputsClose<T>(RunRmsNorm<T>(Impl::kFast, nullptr, s),
                          RunRmsNorm<T>(Impl::kDevice, this->dev_.get(), s), kUlps, "rmsnorm");
  }
}

TYPED_TEST(OpsCuda, Rope) {
  using T = TypeParam;
  const RopeShape s{.batch = 2, .seq_len = 40, .heads = 4, .head_size = 16, .token_stride = 96};
  for (const RopeFreq& f :
       {RopeFreq{.theta = 500000.0f},
        RopeFreq{.theta = 500000.0f, .scaling = RopeScaling::kLlama3, .factor = 32.0f}}) {
    ExpectOutputsClose<T>(RunRope<T>(Impl::kFast, nullptr, s, f),
                          RunRope<T>(Impl::kDevice, this->dev_.get(), s, f), kUlps, "rope");
  }
}

// Packed samples on CUDA against the CPU path: segment starts inside and
// across the kernels' 32-row tiles, one sample of a single token.
TYPED_TEST(OpsCuda, AttentionAndRopeWithPackedSamples) {
  using T = TypeParam;
  const std::vector<std::vector<int>> rows = {{30, 40}, {10, 54, 1, 5}};  // T = 70
  std::vector<int32_t> starts, positions;
  for (const auto& lengths : rows) {
    int start = 0;
    for (int n : lengths) {
      for (int j = 0; j < n; ++j) {
        starts.push_back(start);
        positions.push_back(j);
      }
      start += n;
    }
  }
  const AttentionShape s{.batch = 2, .seq_len = 70, .heads = 4, .kv_heads = 2, .head_size = 40};
  const Outputs cpu = RunAttention<T>(Impl::kFast, nullptr, s, &starts);
  ExpectSumsClose<T>(cpu, RunAttention<T>(Impl::kDevice, this->dev_.get(), s, &starts, &cpu), kUlps,
                     "packed attention");
  const RopeShape r{.batch = 2, .seq_len = 70, .heads = 2, .head_size = 8};
  const RopeFreq f{.theta = 10000.0f};
  ExpectOutputsClose<T>(RunRope<T>(Impl::kFast, nullptr, r, f, &positions),
                        RunRope<T>(Impl::kDevice, this->dev_.get(), r, f, &positions), kUlps,
                        "packed rope");
}

TYPED_TEST(OpsCuda, AttentionShapes) {
  using T = TypeParam;
  const AttentionShape shapes[] = {
      // GPT-2 style MHA inside a fused qkv, several key tiles.
      {.batch = 2,
       .seq_len = 70,
       .heads = 2,
       .kv_heads = 2,
       .head_size = 32,
       .q_stride = 192,
       .kv_stride = 192},
      // GQA, head size not a multiple of 32.
      {.batch = 1, .seq_len = 45, .heads = 6, .kv_heads = 2, .head_size = 40},
      // MQA, one token.
      {.batch = 3, .seq_len = 1, .heads = 4, .kv_heads = 1, .head_size = 16},
      // The largest head size (shared memory above 48 KiB).
      {.batch = 1, .seq_len = 33, .heads = 2, .kv_heads = 1, .head_size = 256},
  };
  for (const AttentionShape& s : shapes) {
    const Outputs cpu = RunAttention<T>(Impl::kFast, nullptr, s);
    ExpectSumsClose<T>(
        cpu, RunAttention<T>(Impl::kDevice, this->dev_.get(), s, nullptr, &cpu), kUlps,
        "attention T=" + std::to_string(s.seq_len) + " HS=" + std::to_string(s.head_size));
  }
}

// The shapes the models run, which bf16 and fp16 take on tensor cores (fp32
// on the scalar kernels): head sizes 64 and 128, GQA ratios 1, 4 and 8,
// sequence lengths up to 4096 and odd ones, one token, a fused qkv, and
// packed samples (a sample of one token among them).
TYPED_TEST(OpsCuda, AttentionAtModelShapes) {
  using T = TypeParam;
  if (kEmulated && std::is_same_v<T, float>) {
    GTEST_SKIP() << "fp32 runs the scalar kernels, which AttentionShapes checks; at these shapes "
                    "they take the emulator minutes";
  }
  const AttentionShape shapes[] = {
      {.batch = 2, .seq_len = 129, .heads = 4, .kv_heads = 4, .head_size = 64},
      {.batch = 1, .seq_len = 1000, .heads = 8, .kv_heads = 2, .head_size = 128},
      {.batch = 1, .seq_len = 4096, .heads = 8, .kv_heads = 1, .head_size = 128},
      {.batch = 1, .seq_len = 4096, .heads = 2, .kv_heads = 2, .head_size = 64},
      {.batch = 3, .seq_len = 1, .heads = 4, .kv_heads = 1, .head_size = 64},
      {.batch = 2,
       .seq_len = 77,
       .heads = 2,
       .kv_heads = 2,
       .head_size = 32,
       .q_stride = 192,
       .kv_stride = 192},
      {.batch = 1, .seq_len = 200, .heads = 6, .kv_heads = 2, .head_size = 96},
  };
  for (const AttentionShape& s : shapes) {
    // The emulator takes minutes per thousand query rows of a head at HS 128.
    if (kEmulated && s.batch * s.seq_len * s.heads > 2400) continue;
    const Outputs cpu = RunAttention<T>(Impl::kFast, nullptr, s);
    ExpectSumsClose<T>(
        cpu, RunAttention<T>(Impl::kDevice, this->dev_.get(), s, nullptr, &cpu), kUlps,
        "attention B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq_len) +
            " NH=" + std::to_string(s.heads) + " NKV=" + std::to_string(s.kv_heads) +
            " HS=" + std::to_string(s.head_size));
  }
  const std::vector<std::vector<int>> rows = {{100, 1, 63, 136}, {300}};
  std::vector<int32_t> starts;
  for (const auto& lengths : rows) {
    int start = 0;
    for (int n : lengths) {
      for (int j = 0; j < n; ++j) starts.push_back(start);
      start += n;
    }
  }
  const AttentionShape p{
      .batch = 2, .seq_len = 300, .heads = kEmulated ? 4 : 8, .kv_heads = 2, .head_size = 128};
  const Outputs cpu = RunAttention<T>(Impl::kFast, nullptr, p, &starts);
  ExpectSumsClose<T>(cpu, RunAttention<T>(Impl::kDevice, this->dev_.get(), p, &starts, &cpu), kUlps,
                     "packed attention HS=128");
}

// 5000 elements are whole 16-byte packs of every type; 5003 leave a tail.
TYPED_TEST(OpsCuda, Activations) {
  using T = TypeParam;
  for (int64_t n : {5000, 5003}) {
    ExpectOutputsClose<T>(RunActivations<T>(Impl::kFast, nullptr, n),
                          RunActivations<T>(Impl::kDevice, this->dev_.get(), n), kUlps,
                          "activations n=" + std::to_string(n));
  }
}

// 64 channels: the bias add in packs; 33: one element at a time.
TYPED_TEST(OpsCuda, ResidualAndBias) {
  using T = TypeParam;
  for (int64_t channels : {33, 64}) {
    ExpectOutputsClose<T>(RunPointwise<T>(Impl::kFast, nullptr, 130, channels),
                          RunPointwise<T>(Impl::kDevice, this->dev_.get(), 130, channels), kUlps,
                          "pointwise C=" + std::to_string(channels));
  }
}

TYPED_TEST(OpsCuda, CrossEntropy) {
  using T = TypeParam;
  const CrossEntropyShape s{.rows = 32, .vocab = 1067, .padded_vocab = 1088};
  for (bool in_place : {false, true}) {
    for (int ignore_every : {0, 3, 1}) {
      ExpectOutputsClose<T>(
          RunCrossEntropy<T>(Impl::kFast, nullptr, s, ignore_every, in_place),
          RunCrossEntropy<T>(Impl::kDevice, this->dev_.get(), s, ignore_every, in_place), kUlps,
          "cross-entropy ignore_every=" + std::to_string(ignore_every));
    }
  }
}

// The gradient by vocabulary slices against the fast CPU path, and on the GPU
// the slices are the whole cross-entropy's dlogits bit for bit (same formula,
// same row_lse float, same count).
TYPED_TEST(OpsCuda, CrossEntropyGradSlices) {
  using T = TypeParam;
  const CrossEntropyShape s{.rows = 40, .vocab = 1067};
  const std::vector<SliceCut> cuts = {{.begin = 0, .width = 500, .stride = 512},
                                      {.begin = 500, .width = 67, .stride = 67, .in_place = true},
                                      {.begin = 567, .width = 500, .stride = 520}};
  for (int ignore_every : {0, 3, 1}) {
    const std::string what = "cross-entropy slices ignore_every=" + std::to_string(ignore_every);
    const Outputs gpu =
        RunCrossEntropyInSlices<T>(Impl::kDevice, this->dev_.get(), s, cuts, ignore_every, 1067);
    ExpectOutputsClose<T>(
        RunCrossEntropyInSlices<T>(Impl::kFast, nullptr, s, cuts, ignore_every, 1067), gpu, kUlps,
        what);
    ExpectBitIdentical(gpu[0].values, gpu[1].values, what + " sliced vs whole");
    for (float p : gpu[2].values) ASSERT_EQ(p, 0.0f) << what << ": slice padding";
  }
}

// A range of wte rows at a time, and the positions alone, against the fast
// CPU path; on the GPU the ranges are the whole gradient bit for bit.
TYPED_TEST(OpsCuda, EmbeddingBackwardRowRanges) {
  using T = TypeParam;
  const EmbeddingShape s{.batch = 3, .seq_len = 20, .channels = 300, .vocab = 67};
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 20}, {20, 27}, {47, 20}};
  const Outputs gpu = RunEmbeddingBackwardRanges<T>(Impl::kDevice, this->dev_.get(), s, ranges);
  ExpectOutputsClose<T>(RunEmbeddingBackwardRanges<T>(Impl::kFast, nullptr, s, ranges), gpu, kUlps,
                        "embedding row ranges");
  ExpectBitIdentical(gpu[0].values, gpu[1].values, "dwte by ranges");
  ExpectBitIdentical(gpu[2].values, gpu[3].values, "dwpe alone");
}

TYPED_TEST(OpsCuda, BackwardIsBitIdenticalRunToRun) {
  using T = TypeParam;
  Device* d = this->dev_.get();
  // fp32's scalar kernels take the emulator minutes at T = 100.
  const int64_t seq = kEmulated && std::is_same_v<T, float> ? 24 : 100;
  const AttentionShape as{.batch = 2, .seq_len = seq, .heads = 4, .kv_heads = 2, .head_size = 64};
  ExpectOutputsIdentical(RunAttention<T>(Impl::kDevice, d, as),
                         RunAttention<T>(Impl::kDevice, d, as), "attention");
  const EmbeddingShape es{.batch = 4, .seq_len = 64, .channels = 96, .vocab = 67};
  ExpectOutputsIdentical(RunEmbedding<T>(Impl::kDevice, d, es, true),
                         RunEmbedding<T>(Impl::kDevice, d, es, true), "embedding");
  ExpectOutputsIdentical(RunLayerNorm<T>(Impl::kDevice, d, {.rows = 300, .channels = 96}),
                         RunLayerNorm<T>(Impl::kDevice, d, {.rows = 300, .channels = 96}),
                         "layernorm");
}

}  // namespace
}  // namespace tierflow

// Gradients in pieces (UnitAccess::GradPieceCapacity): units larger than a
// bucket stream in pieces, in any order, to the same optimizer state as whole
// units, on every accumulation path and with clipping (the norm sums the
// pieces' statistics); the engine refuses a model that breaks the piece
// contract, with an error that says how, instead of hanging or training on
// partial gradients.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/offload_engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

namespace tierflow {
namespace {

using testing_util::BaseOptions;
using testing_util::Data;
using testing_util::kDim;
using testing_util::MakeData;
using testing_util::RunResult;
using testing_util::Train;

TEST(EnginePieces, PiecesReachTheSameStateAsWholeUnits) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int micro : {1, 3}) {
      for (float clip : {0.0f, 0.05f}) {
        EngineOptions whole = BaseOptions();
        whole.weights_dtype = dtype;
        whole.clip_grad_norm = clip;
        EngineOptions cut = whole;
        // 576-parameter layers in pieces of 100 (the last one 76), last piece first.
        cut.grad_bucket_params = 100;
        const Data data = MakeData(3, 6, 5);
        const RunResult a = Train(whole, data, micro);
        const RunResult b = Train(cut, data, micro);
        ASSERT_EQ(a.state.size(), b.state.size());
        if (clip == 0.0f) {
          // Element-wise from identical gradients: identical bits.
          EXPECT_EQ(0, std::memcmp(a.state.data(), b.state.data(), a.state.size() * 4))
              << DTypeName(dtype) << " micro " << micro;
        } else {
          // The norm sums per-piece statistics, rounded apart: the clip
          // factor may differ in its last bit.
          for (size_t i = 0; i < a.state.size(); ++i) {
            ASSERT_NEAR(a.state[i], b.state[i], 1e-7 + 1e-6 * std::fabs(a.state[i]))
                << DTypeName(dtype) << " micro " << micro << " at " << i;
          }
        }
        ASSERT_EQ(a.stats.size(), b.stats.size());
        for (size_t i = 0; i < a.stats.size(); ++i) {
          EXPECT_EQ(a.stats[i].loss, b.stats[i].loss);
          EXPECT_NEAR(a.stats[i].grad_norm, b.stats[i].grad_norm, 1e-7 * a.stats[i].grad_norm);
          EXPECT_GT(a.stats[i].grad_norm, 0.0);
          // Every piece crosses PCIe; only the per-piece statistics differ.
          EXPECT_GE(b.stats[i].d2h_bytes, a.stats[i].d2h_bytes);
        }
      }
    }
  }
}

// The buckets are the given size, not the largest unit's.
TEST(EnginePieces, BucketsHaveTheGivenSize) {
  auto in_use = [](uint64_t bucket_params) {
    auto device = testing_util::CpuDevice();
    testing_util::LinearStack model(testing_util::kLayers, kDim, DType::kF32, 7);
    EngineOptions o = BaseOptions();
    o.grad_bucket_params = bucket_params;
    auto engine = OffloadEngine::Create(*device, model, o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return device->DeviceMemory().in_use_bytes;
  };
  const uint64_t layer = static_cast<uint64_t>(kDim) * kDim;
  // fp32 weights: fp32 transfers, no cast buffer; 3 buckets.
  EXPECT_EQ(in_use(0) - in_use(100), 3 * (layer - 100) * 4);
  // Larger than the largest unit: only the largest unit is allocated.
  EXPECT_EQ(in_use(0), in_use(10 * layer));
}

// Three units of 40 parameters; each mode breaks the contract one way.
enum class Misuse { kOverlap, kTooLarge, kIncomplete, kLeftOpen, kAllBucketsHeld, kOutside };

class MisusingModel : public Trainable {
 public:
  explicit MisusingModel(Misuse misuse) : misuse_(misuse) {}
  std::vector<UnitInfo> Units() const override { return {{"a", 40}, {"b", 40}, {"c", 40}}; }
  Status InitialWeights(int unit, float* out) override {
    for (int i = 0; i < 40; ++i) out[i] = 0.5f;
    return Status::Ok();
  }
  Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                         UnitAccess& access) override {
    for (int u = 0; u < 3; ++u) {
      TF_RETURN_IF_ERROR(access.Weights(u).status());
      TF_RETURN_IF_ERROR(access.ReleaseWeights(u));
    }
    for (int u = 3; u-- > 0;) {
      TF_RETURN_IF_ERROR(access.Weights(u).status());
      TF_RETURN_IF_ERROR(access.ReleaseWeights(u));
    }
    switch (misuse_) {
      case Misuse::kOverlap:
        TF_RETURN_IF_ERROR(Piece(access, 2, 0, 20));
        return Piece(access, 2, 10, 20);
      case Misuse::kTooLarge:
        return Piece(access, 2, 0, 40);
      case Misuse::kOutside:
        return Piece(access, 2, 30, 20);
      case Misuse::kIncomplete:
        for (int u = 2; u >= 0; --u) {
          TF_RETURN_IF_ERROR(Piece(access, u, 0, 20));
          if (u != 1) TF_RETURN_IF_ERROR(Piece(access, u, 20, 20));
        }
        return Status::Ok();
      case Misuse::kLeftOpen:
        for (int u = 2; u >= 0; --u) {
          TF_RETURN_IF_ERROR(Piece(access, u, 0, 20));
          if (u == 0) return access.BeginGrads(u, 20, 20).status();
          TF_RETURN_IF_ERROR(Piece(access, u, 20, 20));
        }
        return Status::Ok();
      case Misuse::kAllBucketsHeld:
        // Two buckets: two open pieces hold both, a third can never come.
        TF_RETURN_IF_ERROR(access.BeginGrads(2, 0, 20).status());
        TF_RETURN_IF_ERROR(access.BeginGrads(1, 0, 20).status());
        return access.BeginGrads(0, 0, 20).status();
    }
    return Status::Ok();
  }
  StatusOr<float> LastLoss() override { return 0.0f; }

 private:
  static Status Piece(UnitAccess& access, int unit, uint64_t begin, uint64_t count) {
    TF_RETURN_IF_ERROR(access.BeginGrads(unit, begin, count).status());
    return access.EndGrads(unit);
  }
  Misuse misuse_;
};

TEST(EnginePieces, RefusesPiecesThatBreakTheContract) {
  struct Case {
    Misuse misuse;
    const char* says;
  };
  for (const Case& c : {Case{Misuse::kOverlap, "overlap an earlier piece"},
                        Case{Misuse::kTooLarge, "exceeds the gradient buckets' 20"},
                        Case{Misuse::kOutside, "not a non-empty range of its 40"},
                        Case{Misuse::kIncomplete, "gradients for 20 of the 40 parameters of 'b'"},
                        Case{Misuse::kLeftOpen, "left a gradient piece of 'a' open"},
                        Case{Misuse::kAllBucketsHeld, "all 2 gradient buckets are held"}}) {
    auto device = testing_util::CpuDevice();
    MisusingModel model(c.misuse);
    EngineOptions o = BaseOptions();
    o.grad_bucket_params = 20;
    o.grad_buckets = 2;
    o.sub_group_params = 20;
    auto engine = OffloadEngine::Create(*device, model, o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    MicroBatch batch;
    batch.batch = 1;
    auto step = (*engine)->Step({batch});
    ASSERT_FALSE(step.ok()) << c.says;
    EXPECT_NE(step.status().message().find(c.says), std::string::npos) << step.status().ToString();
  }
}

}  // namespace
}  // namespace tierflow

// Test helpers for the transformer model: tiny configs, a UnitAccess that
// just hands out per-unit device buffers (no engine) and checks the bucket
// contract, and helpers that run one ForwardBackward and read everything back.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/trainable.h"
#include "kernels/pointwise.h"
#include "model/hf_model.h"
#include "model/transformer.h"
#include "tierflow/device.h"
#include "tierflow/model_config.h"

namespace tierflow {
// Names a config in gtest messages instead of dumping its bytes.
inline void PrintTo(const ModelConfig& c, std::ostream* os) { *os << c.name; }
}  // namespace tierflow

namespace tierflow::testing_util {

// Tiny shapes for gradient checks: 2 blocks, C = 16, V = 23.
inline ModelConfig TinyGpt2() {
  ModelDimensions d{ModelFamily::kGpt2, 23, 8, 16, 2, 2, 0, 32};
  ModelConfig c = MakeModelConfig(d).value();
  c.name = "test-gpt2";
  return c;
}
// GQA (4 query heads, 2 KV heads), untied head.
inline ModelConfig TinyLlama() {
  ModelDimensions d{ModelFamily::kLlama, 23, 8, 16, 2, 4, 2, 24};
  ModelConfig c = MakeModelConfig(d).value();
  c.name = "test-llama";
  return c;
}
// TinyLlama with Llama 3's rope_scaling, the original context shrunk so that
// the tiny head (HS = 4, theta 10000: wavelengths 6.3 and 628) has one pair
// kept and one in the smoothed band (the stretched band: kernels' tests).
inline ModelConfig TinyLlama3() {
  ModelConfig c = TinyLlama();
  c.name = "test-llama3";
  c.rope_scaling_type = "llama3";
  c.rope_scaling_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_positions = 1024;
  return c;
}
// Llama family with Qwen2's q/k/v biases and a tied head.
inline ModelConfig TinyQwenTied() {
  ModelConfig c = TinyLlama();
  c.name = "test-qwen2-tied";
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.tie_embeddings = true;
  return c;
}

// Hands out one weights buffer and one fp32 gradient buffer per unit; the
// gradients survive across calls so tests can read them. BeginGrads zeroes
// (as the engine does). Contract violations become errors.
class DirectUnitAccess : public UnitAccess {
 public:
  DirectUnitAccess(Device& device, Stream& stream, std::vector<UnitInfo> units, DType dtype)
      : device_(device), stream_(stream), units_(std::move(units)), dtype_(dtype) {
    for (const UnitInfo& u : units_) {
      auto w = device_.Allocate(u.num_params * DTypeSize(dtype_), "test weights");
      auto g = device_.Allocate(u.num_params * 4, "test grads");
      EXPECT_TRUE(w.ok() && g.ok());
      weights_.push_back(std::move(w).value());
      grads_.push_back(std::move(g).value());
    }
    open_.assign(units_.size(), false);
    ended_.assign(units_.size(), 0);
    covered_.assign(units_.size(), 0);
  }

  // Uploads fp32 weights (all units, flat) converted to the dtype.
  Status SetWeights(const std::vector<float>& flat) {
    size_t at = 0;
    for (size_t u = 0; u < units_.size(); ++u) {
      const size_t n = units_[u].num_params;
      std::vector<unsigned char> host(n * DTypeSize(dtype_));
      TF_RETURN_IF_ERROR(CastCpu(DType::kF32, flat.data() + at, dtype_, host.data(), n));
      TF_RETURN_IF_ERROR(stream_.CopyHostToDevice(weights_[u].data(), host.data(), host.size()));
      TF_RETURN_IF_ERROR(stream_.Synchronize());
      at += n;
    }
    return Status::Ok();
  }
  // Reads all gradients (flat, fp32). Synchronizes the stream.
  StatusOr<std::vector<float>> ReadGrads() {
    std::vector<float> out;
    for (size_t u = 0; u < units_.size(); ++u) {
      std::vector<float> g(units_[u].num_params);
      TF_RETURN_IF_ERROR(stream_.CopyDeviceToHost(g.data(), grads_[u].data(), g.size() * 4));
      TF_RETURN_IF_ERROR(stream_.Synchronize());
      out.insert(out.end(), g.begin(), g.end());
    }
    return out;
  }

  // Checks the take/release pairing the engine enforces.
  StatusOr<void*> Weights(int unit) override {
    if (taken_.empty()) taken_.assign(units_.size(), 0);
    if (taken_.at(unit)) return InternalError("Weights twice for unit " + std::to_string(unit));
    taken_[unit] = 1;
    return weights_.at(unit).data();
  }
  Status ReleaseWeights(int unit) override {
    if (taken_.empty() || !taken_.at(unit)) {
      return InternalError("ReleaseWeights without Weights for unit " + std::to_string(unit));
    }
    taken_[unit] = 0;
    return Status::Ok();
  }
  // The largest piece the model may ask for (the engine's bucket size).
  void set_capacity(uint64_t params) { capacity_ = params; }
  uint64_t GradPieceCapacity() const override { return capacity_; }
  StatusOr<float*> BeginGrads(int unit, uint64_t begin, uint64_t count) override {
    if (open_.at(unit)) return InternalError("BeginGrads twice for unit " + std::to_string(unit));
    const uint64_t n = units_[unit].num_params;
    if (count == 0 || count > capacity_ || begin > n || count > n - begin) {
      return InternalError("BeginGrads(" + std::to_string(unit) + ", " + std::to_string(begin) +
                           ", " + std::to_string(count) + "): not a piece of a unit of " +
                           std::to_string(n) + " within the capacity " + std::to_string(capacity_));
    }
    open_[unit] = true;
    ++num_open_;
    max_open_ = std::max(max_open_, num_open_);
    pieces_.push_back({unit, begin, count});
    covered_[unit] += count;
    float* g = grads_[unit].as<float>() + begin;
    TF_RETURN_IF_ERROR(stream_.Memset(g, 0, count * 4));
    return g;
  }
  Status EndGrads(int unit) override {
    if (!open_.at(unit))
      return InternalError("EndGrads without BeginGrads, unit " + std::to_string(unit));
    open_[unit] = false;
    --num_open_;
    ++ended_[unit];
    end_order_.push_back(unit);
    return Status::Ok();
  }

  int max_open() const { return max_open_; }
  // Pieces ended per unit, and units in the order their pieces ended.
  const std::vector<int>& ended() const { return ended_; }
  const std::vector<int>& end_order() const { return end_order_; }
  struct Piece {
    int unit;
    uint64_t begin, count;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Parameters of each unit handed out since construction (or ResetCounts).
  const std::vector<uint64_t>& covered() const { return covered_; }
  void ResetCounts() {
    ended_.assign(units_.size(), 0);
    end_order_.clear();
    pieces_.clear();
    covered_.assign(units_.size(), 0);
    max_open_ = num_open_;
  }

 private:
  Device& device_;
  Stream& stream_;
  std::vector<UnitInfo> units_;
  DType dtype_;
  std::vector<DeviceBuffer> weights_, grads_;
  std::vector<bool> open_;
  std::vector<char> taken_;  // per unit: Weights given, not yet released
  std::vector<int> ended_, end_order_;
  std::vector<Piece> pieces_;
  std::vector<uint64_t> covered_;
  uint64_t capacity_ = UINT64_MAX;
  int num_open_ = 0, max_open_ = 0;
};

// One ForwardBackward of `mb`, synchronized: its loss and every unit's
// gradient (flat fp32).
struct RunResult {
  float loss = 0;
  std::vector<float> grads;
};
inline StatusOr<RunResult> RunForwardBackward(TransformerModel& model, DirectUnitAccess& access,
                                              Stream& s, const MicroBatch& mb,
                                              float dloss_scale = 1.0f) {
  TF_RETURN_IF_ERROR(model.ForwardBackward(s, mb, dloss_scale, access));
  TF_RETURN_IF_ERROR(s.Synchronize());
  RunResult r;
  TF_ASSIGN_OR_RETURN(r.loss, model.LastLoss());
  TF_ASSIGN_OR_RETURN(r.grads, access.ReadGrads());
  return r;
}

inline HfModelSaveOptions SaveOptions(DType dtype) {
  HfModelSaveOptions options;
  options.dtype = dtype;
  return options;
}

inline std::unique_ptr<Device> MakeCpuDevice(uint64_t capacity = 512ull << 20) {
  auto d = CreateDevice({.kind = DeviceChoice::kCpu, .memory_capacity_bytes = capacity});
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

// All units' initial weights, flat fp32.
inline std::vector<float> InitialFlat(TransformerModel& model) {
  std::vector<float> flat(model.layout().total_params);
  for (size_t u = 0; u < model.layout().units.size(); ++u) {
    EXPECT_TRUE(
        model.InitialWeights(static_cast<int>(u), flat.data() + model.layout().unit_offsets[u])
            .ok());
  }
  return flat;
}

// Random tokens in [0, V) and next-token targets (one ignored).
struct TokenBatch {
  std::vector<int32_t> inputs, targets;
  int batch = 0, seq_len = 0;
  MicroBatch micro() const {
    MicroBatch mb;
    mb.inputs = inputs.data();
    mb.targets = targets.data();
    mb.batch = batch;
    mb.seq_len = seq_len;
    return mb;
  }
};
inline TokenBatch RandomTokens(int batch, int seq_len, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  TokenBatch tb;
  tb.batch = batch;
  tb.seq_len = seq_len;
  for (int i = 0; i < batch * seq_len; ++i) {
    tb.inputs.push_back(tok(rng));
    tb.targets.push_back(tok(rng));
  }
  tb.targets[1] = -100;
  return tb;
}

}  // namespace tierflow::testing_util

// The synthetic benchmark model.
#include "bench/synthetic_model.h"

#include <cmath>
#include <random>

#include "common/half.h"
#include "kernels/gemm.h"

namespace tierflow {
namespace {

// Runs p on `compute` with operands a and b into c.
Status RunGemm(Stream& compute, GemmParams p, const void* a, const void* b, void* c) {
  p.a = a;
  p.b = b;
  p.c = c;
  return Gemm(compute, p);
}

}  // namespace

StatusOr<std::unique_ptr<SyntheticModel>> SyntheticModel::Create(Device& device, int num_units,
                                                                 uint64_t params_per_unit,
                                                                 int tokens, DType dtype) {
  const int d = static_cast<int>(std::sqrt(static_cast<double>(params_per_unit)));
  if (num_units < 1 || d < 1 || tokens < 1) {
    return InvalidArgumentError(
        "synthetic model: need units >= 1, params per unit >= 1, tokens >= 1");
  }
  std::unique_ptr<SyntheticModel> m(new SyntheticModel(num_units, d, tokens, dtype));
  const size_t bytes = static_cast<size_t>(tokens) * d * DTypeSize(dtype);
  TF_ASSIGN_OR_RETURN(m->x_, device.Allocate(bytes, "synthetic activations"));
  TF_ASSIGN_OR_RETURN(m->y_, device.Allocate(bytes, "synthetic outputs"));
  TF_ASSIGN_OR_RETURN(m->dy_, device.Allocate(bytes, "synthetic output gradients"));
  std::vector<float> host(static_cast<size_t>(tokens) * d);
  std::vector<char> raw(bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  TF_ASSIGN_OR_RETURN(auto stream, device.CreateStream("synthetic init"));
  for (DeviceBuffer* b : {&m->x_, &m->dy_}) {
    for (float& v : host) v = dist(rng);
    ConvertBuffer(DType::kF32, host.data(), dtype, raw.data(), host.size());
    TF_RETURN_IF_ERROR(stream->CopyHostToDevice(b->data(), raw.data(), bytes));
    TF_RETURN_IF_ERROR(stream->Synchronize());
  }
  return m;
}

std::vector<UnitInfo> SyntheticModel::Units() const {
  std::vector<UnitInfo> units;
  units.reserve(static_cast<size_t>(num_units_));
  for (int u = 0; u < num_units_; ++u) {
    units.push_back({"unit." + std::to_string(u), static_cast<uint64_t>(d_) * d_});
  }
  return units;
}

Status SyntheticModel::InitialWeights(int unit, float* out) {
  std::mt19937 rng(100 + unit);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (uint64_t i = 0; i < static_cast<uint64_t>(d_) * d_; ++i) out[i] = dist(rng);
  return Status::Ok();
}

Status SyntheticModel::ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                                       UnitAccess& access) {
  for (int u = 0; u < num_units_; ++u) {
    TF_ASSIGN_OR_RETURN(void* weights, access.Weights(u));
    // y = x W^T: (tokens, d) x (d, d)^T
    TF_RETURN_IF_ERROR(RunGemm(compute, PackedGemm(tokens_, d_, d_, false, true, dtype_, dtype_),
                               x_.data(), weights, y_.data()));
    TF_RETURN_IF_ERROR(access.ReleaseWeights(u));
  }
  for (int u = num_units_ - 1; u >= 0; --u) {
    const uint64_t n = static_cast<uint64_t>(d_) * static_cast<uint64_t>(d_);
    if (n > access.GradPieceCapacity()) {
      return InvalidArgumentError("synthetic model: a unit of " + std::to_string(n) +
                                  " parameters exceeds the gradient buckets' " +
                                  std::to_string(access.GradPieceCapacity()) +
                                  "; it streams whole units only");
    }
    TF_ASSIGN_OR_RETURN(void* weights, access.Weights(u));
    TF_ASSIGN_OR_RETURN(float* grads, access.BeginGrads(u, 0, n));
    // dW += dy^T x: (d, tokens) x (tokens, d), fp32 accumulation into the bucket.
    GemmParams dw = PackedGemm(d_, d_, tokens_, true, false, dtype_, DType::kF32);
    dw.beta = 1.0f;
    dw.alpha = dloss_scale * 1e-3f;
    TF_RETURN_IF_ERROR(RunGemm(compute, dw, dy_.data(), x_.data(), grads));
    TF_RETURN_IF_ERROR(access.EndGrads(u));
    // dx = dy W: (tokens, d) x (d, d)
    TF_RETURN_IF_ERROR(RunGemm(compute, PackedGemm(tokens_, d_, d_, false, false, dtype_, dtype_),
                               dy_.data(), weights, y_.data()));
    TF_RETURN_IF_ERROR(access.ReleaseWeights(u));
  }
  return Status::Ok();
}

}  // namespace tierflow

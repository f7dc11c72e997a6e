// The linear-stack test model.
#include "tests/engine/linear_stack.h"

#include <algorithm>

#include <cmath>
#include <random>

#include "common/half.h"

namespace tierflow::testing_util {

float LinearStackForwardBackward(const std::vector<const float*>& weights, const float* x,
                                 const float* y, int batch, int d, float dloss_scale,
                                 const std::vector<float*>& grads) {
  const int num_layers = static_cast<int>(weights.size());
  // acts[l]: input of layer l, (batch, d); acts[L]: output.
  std::vector<std::vector<float>> acts(num_layers + 1, std::vector<float>(batch * d));
  std::copy(x, x + batch * d, acts[0].begin());
  for (int l = 0; l < num_layers; ++l) {
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < d; ++i) {
        float acc = 0;
        for (int j = 0; j < d; ++j) acc += acts[l][b * d + j] * weights[l][i * d + j];
        acts[l + 1][b * d + i] = (l + 1 < num_layers) ? std::tanh(acc) : acc;
      }
    }
  }
  double loss = 0;
  std::vector<float> dout(batch * d);
  const float inv = 1.0f / static_cast<float>(batch * d);
  for (int i = 0; i < batch * d; ++i) {
    float diff = acts[num_layers][i] - y[i];
    loss += 0.5 * diff * diff;
    dout[i] = diff * inv * dloss_scale;
  }
  for (int l = num_layers - 1; l >= 0; --l) {
    if (l + 1 < num_layers) {  // through tanh: out = tanh(z), dz = dout * (1 - out^2)
      for (int i = 0; i < batch * d; ++i) {
        float o = acts[l + 1][i];
        dout[i] *= 1.0f - o * o;
      }
    }
    std::vector<float> din(batch * d, 0.0f);
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < d; ++i) {
        const float g = dout[b * d + i];
        for (int j = 0; j < d; ++j) {
          grads[l][i * d + j] += g * acts[l][b * d + j];
          din[b * d + j] += g * weights[l][i * d + j];
        }
      }
    }
    dout.swap(din);
  }
  return static_cast<float>(loss / (batch * d));
}

LinearStack::LinearStack(int num_layers, int d, DType weights_dtype, uint32_t seed)
    : num_layers_(num_layers), d_(d), weights_dtype_(weights_dtype) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(d)));
  initial_.resize(num_layers);
  for (auto& w : initial_) {
    w.resize(static_cast<size_t>(d) * d);
    for (float& v : w) v = dist(rng);
  }
}

std::vector<UnitInfo> LinearStack::Units() const {
  std::vector<UnitInfo> units;
  for (int l = 0; l < num_layers_; ++l) {
    units.push_back({"linear." + std::to_string(l), static_cast<uint64_t>(d_) * d_});
  }
  return units;
}

Status LinearStack::InitialWeights(int unit, float* out) {
  std::copy(initial_[unit].begin(), initial_[unit].end(), out);
  return Status::Ok();
}

Status LinearStack::ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                                    UnitAccess& access) {
  if (compute.device_kind() != DeviceKind::kCpu) {
    return UnimplementedError("the linear-stack test model runs on the CPU device only");
  }
  // Forward and backward run once on the compute stream, from each layer's
  // weights widened (taken and released in forward order, as the default
  // weights schedule says); each layer's gradients then go into its engine
  // bucket, last layer first, as a real backward hands them over, and each
  // layer is taken again for its backward.
  const size_t n = static_cast<size_t>(d_) * d_;
  auto widened =
      std::make_shared<std::vector<std::vector<float>>>(num_layers_, std::vector<float>(n));
  for (int l = 0; l < num_layers_; ++l) {
    TF_ASSIGN_OR_RETURN(void* w, access.Weights(l));
    const DType dtype = weights_dtype_;
    TF_RETURN_IF_ERROR(compute.HostCallback([widened, w, l, n, dtype]() -> Status {
      ConvertBuffer(dtype, w, DType::kF32, (*widened)[l].data(), n);
      return Status::Ok();
    }));
    TF_RETURN_IF_ERROR(access.ReleaseWeights(l));
  }
  std::vector<std::vector<float>> local_grads(num_layers_, std::vector<float>(n, 0.0f));
  auto grads_host = std::make_shared<std::vector<std::vector<float>>>(std::move(local_grads));
  TF_RETURN_IF_ERROR(compute.HostCallback([=, this]() -> Status {
    std::vector<const float*> w(num_layers_);
    std::vector<float*> g(num_layers_);
    for (int l = 0; l < num_layers_; ++l) {
      w[l] = (*widened)[l].data();
      g[l] = (*grads_host)[l].data();
    }
    last_loss_ = LinearStackForwardBackward(w, batch.dense_inputs, batch.dense_targets, batch.batch,
                                            d_, dloss_scale, g);
    return Status::Ok();
  }));
  // A layer larger than the engine's buckets goes in pieces of the
  // buckets' size, its last piece first (any order is allowed).
  const size_t piece = std::min<uint64_t>(n, access.GradPieceCapacity());
  for (int l = num_layers_ - 1; l >= 0; --l) {
    TF_RETURN_IF_ERROR(access.Weights(l).status());
    TF_RETURN_IF_ERROR(access.ReleaseWeights(l));
    for (size_t end = n; end > 0;) {
      const size_t begin = end > piece ? end - piece : 0;
      TF_ASSIGN_OR_RETURN(float* dev_grad, access.BeginGrads(l, begin, end - begin));
      TF_RETURN_IF_ERROR(compute.HostCallback([grads_host, dev_grad, l, begin, end]() -> Status {
        const std::vector<float>& src = (*grads_host)[l];
        for (size_t i = begin; i < end; ++i) dev_grad[i - begin] += src[i];
        return Status::Ok();
      }));
      TF_RETURN_IF_ERROR(access.EndGrads(l));
      end = begin;
    }
  }
  return Status::Ok();
}

}  // namespace tierflow::testing_util

// Scalar double-precision optimizer references (see optim_reference.h).
#include "optim/optim_reference.h"

#include <cmath>

#include "common/half.h"

namespace tierflow {

double ReferenceGrad(const void* grads, DType grad_dtype, size_t i) {
  switch (grad_dtype) {
    case DType::kF32:
      return static_cast<const float*>(grads)[i];
    case DType::kBF16:
      return ToFloat(static_cast<const bf16*>(grads)[i]);
    case DType::kF16:
      return ToFloat(static_cast<const fp16*>(grads)[i]);
  }
  return std::nan("");
}

void AdamReferenceStep(const AdamOptions& o, const AdamStepArgs& args, const void* grads,
                       DType grad_dtype, size_t n, double* params, double* exp_avg,
                       double* exp_avg_sq) {
  const double lr = o.lr, beta1 = o.beta1, beta2 = o.beta2, eps = o.eps, wd = o.weight_decay;
  const double t = static_cast<double>(args.step);
  const double bc1 = o.bias_correction ? 1.0 - std::pow(beta1, t) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(beta2, t) : 1.0;
  for (size_t i = 0; i < n; ++i) {
    double g = ReferenceGrad(grads, grad_dtype, i) * static_cast<double>(args.grad_scale);
    double p = params[i];
    if (!o.decoupled) g += wd * p;
    const double m = beta1 * exp_avg[i] + (1.0 - beta1) * g;
    const double v = beta2 * exp_avg_sq[i] + (1.0 - beta2) * g * g;
    const double denom = std::sqrt(v) / std::sqrt(bc2) + eps;
    if (o.decoupled) p *= 1.0 - lr * wd;
    p -= (lr / bc1) * (m / denom);
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

void LionReferenceStep(const LionOptions& o, const LionStepArgs& args, const void* grads,
                       DType grad_dtype, size_t n, double* params, double* exp_avg) {
  const double lr = o.lr, beta1 = o.beta1, beta2 = o.beta2, wd = o.weight_decay;
  for (size_t i = 0; i < n; ++i) {
    const double g = ReferenceGrad(grads, grad_dtype, i) * static_cast<double>(args.grad_scale);
    const double c = beta1 * exp_avg[i] + (1.0 - beta1) * g;
    const double sign = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
    params[i] = params[i] * (1.0 - lr * wd) - lr * sign;
    exp_avg[i] = beta2 * exp_avg[i] + (1.0 - beta2) * g;
  }
}

void SgdReferenceStep(const SgdOptions& o, const SgdStepArgs& args, const void* grads,
                      DType grad_dtype, size_t n, double* params, double* momentum_buffer) {
  const double lr = o.lr, momentum = o.momentum, dampening = o.dampening, wd = o.weight_decay;
  for (size_t i = 0; i < n; ++i) {
    double g = ReferenceGrad(grads, grad_dtype, i) * static_cast<double>(args.grad_scale);
    if (wd != 0) g += wd * params[i];
    if (momentum > 0) {
      double& buf = momentum_buffer[i];
      buf = args.step == 1 ? g : momentum * buf + (1.0 - dampening) * g;
      g = o.nesterov ? g + momentum * buf : buf;
    }
    params[i] -= lr * g;
  }
}

}  // namespace tierflow

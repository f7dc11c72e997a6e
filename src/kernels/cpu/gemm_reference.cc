// The reference GEMM: a plain triple loop, double accumulation.
#include "common/half.h"
#include "kernels/gemm.h"

namespace tierflow {
namespace {

double Load(DType t, const void* base, int64_t index) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[index];
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const bf16*>(base)[index]);
    case DType::kF16:
      return Fp16ToFloat(static_cast<const fp16*>(base)[index]);
  }
  return 0;
}

void Store(DType t, void* base, int64_t index, double v) {
  float f = static_cast<float>(v);
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[index] = f;
      break;
    case DType::kBF16:
      static_cast<bf16*>(base)[index] = FloatToBf16(f);
      break;
    case DType::kF16:
      static_cast<fp16*>(base)[index] = FloatToFp16(f);
      break;
  }
}

}  // namespace

Status GemmReference(const GemmParams& p) {
  TF_RETURN_IF_ERROR(ValidateGemm(p));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          int64_t ai = b * p.stride_a + (p.trans_a ? l * p.lda + i : i * p.lda + l);
          int64_t bi = b * p.stride_b + (p.trans_b ? j * p.ldb + l : l * p.ldb + j);
          acc += Load(p.ab_type, p.a, ai) * Load(p.ab_type, p.b, bi);
        }
        int64_t ci = b * p.stride_c + i * p.ldc + j;
        double out = p.alpha * acc;
        if (p.beta != 0.0f) out += p.beta * Load(p.c_type, p.c, ci);
        Store(p.c_type, p.c, ci, out);
      }
    }
  }
  return Status::Ok();
}

}  // namespace tierflow

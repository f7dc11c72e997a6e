// What the CUDA norms (norms.cu: LayerNorm and RMSNorm) share: a warp per row,
// kNormWarpsPerBlock rows per block, and the column-sum term of dweight.
#pragma once

#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow::cuda_ops {

constexpr int kNormWarpsPerBlock = 8;

// The row of the calling thread's warp.
__device__ __forceinline__ int64_t NormRow() {
  return static_cast<int64_t>(blockIdx.x) * kNormWarpsPerBlock + threadIdx.x / kWarpSize;
}

// Threads per block, and the blocks for `rows` rows.
constexpr int kNormThreads = kNormWarpsPerBlock * kWarpSize;
inline unsigned int NormBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kNormWarpsPerBlock - 1) / kNormWarpsPerBlock);
}

// dweight[c] += sum_r dout[r, c] * (inp[r, c] - mean[r]) * rstd[r].
template <typename T>
struct NormTimesGrad {
  const T* dout;
  const T* inp;
  const float* mean;  // nullptr for RMSNorm (no centring)
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    const float centre = mean != nullptr ? mean[r] : 0.0f;
    return Load(dout + r * C + c) * (Load(inp + r * C + c) - centre) * rstd[r];
  }
};

}  // namespace tierflow::cuda_ops

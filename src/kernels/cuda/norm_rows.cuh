// What the CUDA norms (norms.cu: LayerNorm and RMSNorm) share: a warp per row,
// kNormWarpsPerBlock rows per block, the row walked in 16-byte packs, and
// the column-sum term of dweight.
#pragma once

#include <initializer_list>

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

// A warp walks its row in packs of kN elements (LoadFloats/StoreFloats,
// cuda_ops_common.cuh): lane l takes the packs at columns l * kN,
// (l + 32) * kN, ... (kN = 1: one element at a time).

// The pack width a norm over rows of C elements can use: 16 bytes when C is a
// whole number of packs and every tensor starts on a 16-byte boundary (so
// every row does), else 1.
template <typename T>
inline bool NormRowsPack(int64_t C, std::initializer_list<const void*> tensors) {
  if (C % kPackElems<T> != 0) return false;
  for (const void* p : tensors) {
    if (p != nullptr && !AlignedTo(p, 16)) return false;
  }
  return true;
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

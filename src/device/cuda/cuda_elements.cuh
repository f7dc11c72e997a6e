// Device-side element access of the CUDA kernels: fp32 loads and stores of
// the storage types (round-to-nearest-even, matching src/common/half.h), the
// grid-stride loop and its grid, and the launch check that turns a failed
// launch into a Status. The device's own kernels (grad_ops.cu) use them, and
// kernels/cuda/cuda_ops_common.cuh builds the ops' helpers on them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device/cuda/cuda_check.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow::cuda_ops {

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const bf16* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}
__device__ __forceinline__ float Load(const fp16* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(bf16* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void Store(fp16* p, float v) {
  *reinterpret_cast<__half*>(p) = __float2half_rn(v);
}

// Grid size for a grid-stride loop over n elements.
inline unsigned int GridFor(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535 * 16) blocks = 65535 * 16;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

}  // namespace tierflow::cuda_ops

// A grid-stride loop: `TF_GRID_STRIDE(i, n) { body }` runs body for every
// int64_t i in [0, n) across the grid (GridFor's blocks), each thread taking
// every (grid size)-th one from its global index.
#define TF_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace tierflow::cuda_ops {

// Checks the launch that was just made on the calling thread.
inline Status CheckLaunch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return CudaStatus(err, kernel, __FILE__, __LINE__);
}

}  // namespace tierflow::cuda_ops

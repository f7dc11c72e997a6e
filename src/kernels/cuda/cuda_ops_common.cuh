// Device-side helpers of the CUDA op kernels: fp32 loads and stores of the
// storage types (round-to-nearest-even, matching src/common/half.h), warp and
// block reductions with a fixed order (so results are deterministic), and the
// launch check that turns a failed launch into a Status.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device/cuda/cuda_check.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow::cuda_ops {

constexpr int kWarpSize = 32;

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

// Butterfly reductions: every lane ends with the same value, same order on every run.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block-wide sum or max for blockDim.x a multiple of 32 (<= 1024). `scratch`
// holds 32 floats of shared memory. Every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float BlockReduce(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = kMax ? WarpMax(v) : WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < num_warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? WarpMax(r) : WarpSum(r);
}

// Grid size for a grid-stride loop over n elements.
inline unsigned int GridFor(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535 * 16) blocks = 65535 * 16;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned int>(blocks);
}

// Checks the launch that was just made on the calling thread.
inline Status CheckLaunch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return CudaStatus(err, kernel, __FILE__, __LINE__);
}

// Column sums over rows with a fixed reduction tree: block (32, 32) owns 32
// columns; thread (x, y) sums rows y, y+32, ... of column x in order, then
// thread y == 0 adds the 32 partials in order. out[c] += sum_r f(r, c).
template <typename F>
__global__ void ColumnSumKernel(float* out, int64_t rows, int64_t cols, F f) {
  __shared__ float partial[32][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += 32) acc += f(r, c);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int y = 0; y < 32; ++y) sum += partial[y][threadIdx.x];
    out[c] += sum;
  }
}

template <typename F>
Status LaunchColumnSum(cudaStream_t stream, float* out, int64_t rows, int64_t cols, F f,
                       const char* what) {
  dim3 block(32, 32);
  dim3 grid(static_cast<unsigned int>((cols + 31) / 32));
  ColumnSumKernel<<<grid, block, 0, stream>>>(out, rows, cols, f);
  return CheckLaunch(what);
}

}  // namespace tierflow::cuda_ops

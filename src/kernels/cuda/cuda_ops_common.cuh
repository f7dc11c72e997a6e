// Device-side helpers of the CUDA op kernels: the device's fp32 loads and
// stores of the storage types, grid size and launch check
// (device/cuda/cuda_elements.cuh), the launch of a grid-stride kernel, and
// warp, block and column reductions with a fixed order (so results are
// deterministic).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/cuda/cuda_elements.cuh"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow::cuda_ops {

constexpr int kWarpSize = 32;

// Threads per block of the ops' grid-stride kernels (TF_GRID_STRIDE).
constexpr int kGridStrideThreads = 256;

// Launches `kernel` on `stream` with `args`, and checks the launch, naming `what`.
template <typename... Params, typename... Args>
Status Launch(cudaStream_t stream, dim3 grid, dim3 block, const char* what,
              void (*kernel)(Params...), const Args&... args) {
  kernel<<<grid, block, 0, stream>>>(args...);
  return CheckLaunch(what);
}

// Launches grid-stride `kernel` (launch bounds kGridStrideThreads) over n
// elements; as Launch.
template <typename... Params, typename... Args>
Status LaunchGridStride(cudaStream_t stream, int64_t n, const char* what, void (*kernel)(Params...),
                        const Args&... args) {
  return Launch(stream, GridFor(n, kGridStrideThreads), kGridStrideThreads, what, kernel, args...);
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

// Column sums over rows with a fixed reduction tree: block (32, 32) owns 32
// columns; thread (x, y) sums rows y, y+32, ... of column x in order, then
// thread y == 0 adds the 32 partials in order. out[c] += sum_r f(r, c).
// static: each .cu keeps its own instance, even of a functor the .cu files
// share (GradOnly, NormTimesGrad), as a kernel defined in a header should.
template <typename F>
static __global__ void ColumnSumKernel(float* out, int64_t rows, int64_t cols, F f) {
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

// The column-sum term of a bias gradient: dout[r, c] of a (rows, C) tensor.
template <typename T>
struct GradOnly {
  const T* dout;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const { return Load(dout + r * C + c); }
};

template <typename F>
Status LaunchColumnSum(cudaStream_t stream, float* out, int64_t rows, int64_t cols, F f,
                       const char* what) {
  dim3 block(32, 32);
  dim3 grid(static_cast<unsigned int>((cols + 31) / 32));
  ColumnSumKernel<<<grid, block, 0, stream>>>(out, rows, cols, f);
  return CheckLaunch(what);
}

}  // namespace tierflow::cuda_ops

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
  TF_CUDA_LAUNCH(grid, block, 0, stream, kernel)(args...);
  return CheckLaunch(what);
}

// Launches grid-stride `kernel` (launch bounds kGridStrideThreads) over n
// elements; as Launch.
template <typename... Params, typename... Args>
Status LaunchGridStride(cudaStream_t stream, int64_t n, const char* what, void (*kernel)(Params...),
                        const Args&... args) {
  return Launch(stream, GridFor(n, kGridStrideThreads), kGridStrideThreads, what, kernel, args...);
}

// ---- Element-wise maps over 16-byte packs (Pack: cuda_elements.cuh) ----

// One pack of kN elements of T as fp32, and back.
template <int kN, typename T>
__device__ __forceinline__ void LoadFloats(const T* p, float (&out)[kN]) {
  const Pack<T, kN> pk = LoadPack<kN>(p);
#pragma unroll
  for (int j = 0; j < kN; ++j) out[j] = Load(&pk.v[j]);
}
template <int kN, typename T>
__device__ __forceinline__ void StoreFloats(T* p, const float (&in)[kN]) {
  Pack<T, kN> pk;
#pragma unroll
  for (int j = 0; j < kN; ++j) Store(&pk.v[j], in[j]);
  StorePack<kN>(p, pk);
}

// The tensors of a map: kIn inputs, kOut outputs, all of T and n elements.
template <typename T, int kIn, int kOut>
struct MapArgs {
  const T* in[kIn];
  T* out[kOut];
};

// y[0..kOut) = op(x[0..kIn)) for every element, in fp32: packs of kN over
// [0, n - n % kN), then the tail one element at a time. op is called as
// op(const float* x, float* y).
template <int kN, typename T, int kIn, int kOut, typename Op>
static __global__ void __launch_bounds__(kGridStrideThreads)
    MapKernel(MapArgs<T, kIn, kOut> a, int64_t n, Op op) {
  const int64_t packs = n / kN;
  TF_GRID_STRIDE(p, packs) {
    const int64_t i = p * kN;
    float x[kIn][kN];
#pragma unroll
    for (int k = 0; k < kIn; ++k) {
      const Pack<T, kN> pk = LoadPack<kN>(a.in[k] + i);
#pragma unroll
      for (int j = 0; j < kN; ++j) x[k][j] = Load(&pk.v[j]);
    }
    Pack<T, kN> y[kOut];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      float xs[kIn], ys[kOut];
#pragma unroll
      for (int k = 0; k < kIn; ++k) xs[k] = x[k][j];
      op(xs, ys);
#pragma unroll
      for (int k = 0; k < kOut; ++k) Store(&y[k].v[j], ys[k]);
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) StorePack<kN>(a.out[k] + i, y[k]);
  }
  TF_GRID_STRIDE(t, n - packs * kN) {
    const int64_t i = packs * kN + t;
    float xs[kIn], ys[kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) xs[k] = Load(a.in[k] + i);
    op(xs, ys);
#pragma unroll
    for (int k = 0; k < kOut; ++k) Store(a.out[k] + i, ys[k]);
  }
}

// Launches MapKernel in packs when every tensor is 16-byte aligned, one
// element per step otherwise; checks the launch, naming `what`.
template <typename T, int kIn, int kOut, typename Op>
Status LaunchMap(cudaStream_t stream, const char* what, const MapArgs<T, kIn, kOut>& a, int64_t n,
                 Op op) {
  bool aligned = true;
  for (const T* p : a.in) aligned = aligned && AlignedTo(p, 16);
  for (T* p : a.out) aligned = aligned && AlignedTo(p, 16);
  constexpr int kN = kPackElems<T>;
  if (aligned && n >= kN) {
    return LaunchGridStride(stream, n / kN, what, MapKernel<kN, T, kIn, kOut, Op>, a, n, op);
  }
  return LaunchGridStride(stream, n, what, MapKernel<1, T, kIn, kOut, Op>, a, n, op);
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
  TF_CUDA_LAUNCH(grid, block, 0, stream, ColumnSumKernel<F>)(out, rows, cols, f);
  return CheckLaunch(what);
}

}  // namespace tierflow::cuda_ops

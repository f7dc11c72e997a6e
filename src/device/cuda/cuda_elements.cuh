// Device-side element access of the CUDA kernels: fp32 loads and stores of
// the storage types (round-to-nearest-even, matching src/common/half.h),
// aligned packs of them, the grid-stride loop and its grid, the launch
// (TF_CUDA_LAUNCH, dynamic shared memory) and the check that turns a failed
// launch into a Status. The device's own kernels (grad_ops.cu) use them, and
// kernels/cuda/cuda_ops_common.cuh builds the ops' helpers on them.
//
// With TIERFLOW_CUDA_EMULATION the same sources compile as C++ and run on
// host threads (device/cuda/emulator.h): the launch, the dynamic shared
// memory and the check are the emulator's.
#pragma once

#ifdef TIERFLOW_CUDA_EMULATION
#include "device/cuda/emulator.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstddef>
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

// ---- Packs: kN elements moved by one aligned load or store ----
//
// A bf16 load of 2 bytes per thread keeps too few bytes in flight to reach
// HBM's bandwidth (the first H200 run: 0.49 of a device copy); 16 bytes per
// thread per tensor does. A pointer not aligned to its pack (a view into a
// larger buffer) runs the same kernel with kN = 1.

template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

template <int kN, typename T>
__device__ __forceinline__ Pack<T, kN> LoadPack(const T* p) {
  return *reinterpret_cast<const Pack<T, kN>*>(p);
}
template <int kN, typename T>
__device__ __forceinline__ void StorePack(T* p, const Pack<T, kN>& x) {
  *reinterpret_cast<Pack<T, kN>*>(p) = x;
}

// Elements of T per 16-byte pack.
template <typename T>
constexpr int kPackElems = 16 / static_cast<int>(sizeof(T));

inline bool AlignedTo(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
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

// TF_CUDA_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...) is
// kernel<<<grid, block, shared_bytes, stream>>>(args...); the kernel comes
// last, as a template's arguments may hold commas, and names every template
// argument (the emulator takes its address).
// TF_DYNAMIC_SHARED(T, name) declares the block's dynamic shared memory as
// T name[] (16-byte aligned).
#ifdef TIERFLOW_CUDA_EMULATION
#define TF_CUDA_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::tierflow::cuda_emu::Launch(dim3(grid), dim3(block), (shared_bytes), __VA_ARGS__)
#define TF_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::tierflow::cuda_emu::DynamicShared())
#else
#define TF_CUDA_LAUNCH(grid, block, shared_bytes, stream, ...) \
  __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#define TF_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif

namespace tierflow::cuda_ops {

// Checks the launch that was just made on the calling thread (the emulator
// stops the process on a misuse, so there every launch that returns is Ok).
inline Status CheckLaunch(const char* kernel) {
#ifdef TIERFLOW_CUDA_EMULATION
  (void)kernel;
  return Status::Ok();
#else
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return CudaStatus(err, kernel, __FILE__, __LINE__);
#endif
}

// Lets `kernel` take `num_bytes` of dynamic shared memory: past 48 KiB a
// kernel must ask first.
template <typename Kernel>
Status AllowDynamicShared(Kernel kernel, size_t num_bytes) {
  if (num_bytes <= 48 * 1024) return Status::Ok();
#ifdef TIERFLOW_CUDA_EMULATION
  (void)kernel;
#else
  TF_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(num_bytes)));
#endif
  return Status::Ok();
}

}  // namespace tierflow::cuda_ops

// The NCCL backend's device loops (comm/nccl_kernels.h).
#include "comm/nccl_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tierflow::comm::nccl_detail {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) Widen(const T* in, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    out[i] = static_cast<float>(in[i]);  // __nv_bfloat16, __half: their operator float
  }
}

__global__ void __launch_bounds__(kThreads) Add(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    dst[i] += src[i];
  }
}

unsigned Blocks(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

cudaError_t WidenToFloat(const void* in, Element type, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (type) {
    case Element::kF32:
      Widen<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const float*>(in), n, out);
      break;
    case Element::kBF16:
      Widen<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), n, out);
      break;
    case Element::kF16:
      Widen<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const __half*>(in), n, out);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t AddInto(float* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Add<<<Blocks(n), kThreads, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

}  // namespace tierflow::comm::nccl_detail

// The NCCL backend's two device loops (nccl_kernels.cu), on its stream:
// contributions widened to fp32 before NCCL sums them, and a running sum
// continued. Plain C++ declarations so that nccl_communicator.cc, built by
// the host compiler, can call them.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace tierflow::comm::nccl_detail {

// What a contribution is made of (tierflow's DType, kept out of this header
// so that the .cu file, built as C++17, includes nothing of tierflow's).
enum class Element { kF32, kBF16, kF16 };

// out[i] = float(in[i]) for i < n.
cudaError_t WidenToFloat(const void* in, Element type, size_t n, float* out, cudaStream_t stream);

// dst[i] += src[i] for i < n.
cudaError_t AddInto(float* dst, const float* src, size_t n, cudaStream_t stream);

}  // namespace tierflow::comm::nccl_detail

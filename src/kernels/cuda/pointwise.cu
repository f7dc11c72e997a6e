// Residual add, bias add (both over 16-byte packs where aligned) and bias
// backward on CUDA (the cast is the device's: src/device/cuda/grad_ops.cu).
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/pointwise.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

struct AddOp {
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + in[1]; }
};

// out[r, c] += bias[c] in packs of kN along c (kN divides C when kN > 1).
template <int kN, typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    BiasAddKernel(T* out, const T* bias, int64_t n, int64_t C) {
  TF_GRID_STRIDE(p, n / kN) {
    const int64_t i = p * kN;
    cuda_ops::Pack<T, kN> x = cuda_ops::LoadPack<kN>(out + i);
    const cuda_ops::Pack<T, kN> b = cuda_ops::LoadPack<kN>(bias + i % C);
#pragma unroll
    for (int j = 0; j < kN; ++j) Store(&x.v[j], Load(&x.v[j]) + Load(&b.v[j]));
    cuda_ops::StorePack<kN>(out + i, x);
  }
}

}  // namespace

template <typename T>
Status ResidualForwardCuda(cudaStream_t stream, T* out, const T* a, const T* b, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("ResidualForwardCuda", "n", n));
  return cuda_ops::LaunchMap(stream, "ResidualKernel", cuda_ops::MapArgs<T, 2, 1>{{a, b}, {out}}, n,
                             AddOp{});
}

template <typename T>
Status BiasAddForwardCuda(cudaStream_t stream, T* out, const T* bias, int64_t rows,
                          int64_t channels) {
  TF_RETURN_IF_ERROR(ops_internal::CheckAllPositive("BiasAddForwardCuda",
                                                    {{"rows", rows}, {"channels", channels}}));
  constexpr int kN = cuda_ops::kPackElems<T>;
  const int64_t n = rows * channels;
  if (channels % kN == 0 && cuda_ops::AlignedTo(out, 16) && cuda_ops::AlignedTo(bias, 16)) {
    return cuda_ops::LaunchGridStride(stream, n / kN, "BiasAddKernel", BiasAddKernel<kN, T>, out,
                                      bias, n, channels);
  }
  return cuda_ops::LaunchGridStride(stream, n, "BiasAddKernel", BiasAddKernel<1, T>, out, bias, n,
                                    channels);
}

template <typename T>
Status BiasBackwardCuda(cudaStream_t stream, float* dbias, const T* dout, int64_t rows,
                        int64_t channels) {
  TF_RETURN_IF_ERROR(
      ops_internal::CheckAllPositive("BiasBackwardCuda", {{"rows", rows}, {"channels", channels}}));
  return cuda_ops::LaunchColumnSum(stream, dbias, rows, channels,
                                   cuda_ops::GradOnly<T>{dout, channels}, "BiasBackward");
}

#define TF_INSTANTIATE_POINTWISE_CUDA(T)                                                 \
  template Status ResidualForwardCuda<T>(cudaStream_t, T*, const T*, const T*, int64_t); \
  template Status BiasAddForwardCuda<T>(cudaStream_t, T*, const T*, int64_t, int64_t);   \
  template Status BiasBackwardCuda<T>(cudaStream_t, float*, const T*, int64_t, int64_t);
TF_INSTANTIATE_POINTWISE_CUDA(float)
TF_INSTANTIATE_POINTWISE_CUDA(bf16)
TF_INSTANTIATE_POINTWISE_CUDA(fp16)

}  // namespace tierflow

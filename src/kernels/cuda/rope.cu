// RoPE on CUDA: one thread per rotated pair (i, i + HS/2). The angle is
// computed as on the CPU (fp32 t * inv_freq, inv_freq from kernels/rope_freq.h), so
// the two devices differ only by cosf/sinf rounding. The frequencies are
// computed once on the host (rope_freq.h's double-precision pow, which
// consumer GPUs run at 1/64 of the fp32 rate) and passed in the launch.
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/rope.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

// One head's inverse frequencies: HS / 2 of them, passed by value (1 KiB of
// the 4 KiB of kernel parameters).
constexpr int64_t kMaxPairs = 256;
struct InvFreqTable {
  float v[kMaxPairs];
};

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    RopeKernel(T* out, const T* inp, int64_t rows, int64_t T_, int64_t heads, int64_t HS,
               int64_t stride, const int32_t* positions, InvFreqTable freq, float sign) {
  const int64_t half = HS / 2;
  const int64_t n = rows * heads * half;
  TF_GRID_STRIDE(idx, n) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % heads;
    const int64_t row = idx / (half * heads);
    const int64_t t = positions != nullptr ? positions[row] : row % T_;
    const float inv_freq = freq.v[i];
    const float angle = static_cast<float>(t) * inv_freq;
    const float c = cosf(angle), sn = sign * sinf(angle);
    const int64_t base = row * stride + h * HS;
    const float x0 = Load(inp + base + i), x1 = Load(inp + base + i + half);
    Store(out + base + i, x0 * c - x1 * sn);
    Store(out + base + i + half, x1 * c + x0 * sn);
  }
}

}  // namespace

template <typename T>
Status RopeCuda(cudaStream_t stream, T* out, const T* inp, const RopeShape& s, const RopeFreq& freq,
                float sign) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeCuda", s, freq));
  if (s.head_size / 2 > kMaxPairs) {
    return InvalidArgumentError("RopeCuda: head size " + std::to_string(s.head_size) +
                                " above the kernel's " + std::to_string(2 * kMaxPairs) +
                                "; raise kMaxPairs in kernels/cuda/rope.cu");
  }
  InvFreqTable table{};
  for (int64_t i = 0; i < s.head_size / 2; ++i) table.v[i] = RopeInvFreq(i, s.head_size, freq);
  const int64_t rows = s.batch * s.seq_len;
  return cuda_ops::LaunchGridStride(stream, rows * s.heads * (s.head_size / 2), "RopeKernel",
                                    RopeKernel<T>, out, inp, rows, s.seq_len, s.heads, s.head_size,
                                    s.stride(), s.positions, table, sign);
}

template Status RopeCuda<float>(cudaStream_t, float*, const float*, const RopeShape&,
                                const RopeFreq&, float);
template Status RopeCuda<bf16>(cudaStream_t, bf16*, const bf16*, const RopeShape&, const RopeFreq&,
                               float);
template Status RopeCuda<fp16>(cudaStream_t, fp16*, const fp16*, const RopeShape&, const RopeFreq&,
                               float);

}  // namespace tierflow

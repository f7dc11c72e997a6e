// RoPE on CUDA: one thread per kN rotated pairs (i, i + HS/2), a 16-byte
// pack from each half where the views are aligned, one pair otherwise. The angle is
// computed as on the CPU (fp32 t * inv_freq, inv_freq from kernels/rope_freq.h), so
// the two devices differ only by cosf/sinf rounding. The frequencies are
// computed once on the host (rope_freq.h's double-precision pow, which
// consumer GPUs run at 1/64 of the fp32 rate) and passed in the launch.
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/rope.h"

namespace tierflow {
namespace {

// One head's inverse frequencies: HS / 2 of them, passed by value (1 KiB of
// the 4 KiB of kernel parameters).
constexpr int64_t kMaxPairs = 256;
struct InvFreqTable {
  float v[kMaxPairs];
};

// kN consecutive pairs per thread: a pack from each half of the head. The
// table is a __grid_constant__ parameter, read in place (a by-value array
// indexed at run time was copied to local memory first).
template <int kN, typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    RopeKernel(T* out, const T* inp, int64_t rows, int64_t T_, int64_t heads, int64_t HS,
               int64_t stride, const int32_t* positions, const __grid_constant__ InvFreqTable freq,
               float sign) {
  const int64_t half = HS / 2;
  const int64_t groups = half / kN;
  const int64_t n = rows * heads * groups;
  TF_GRID_STRIDE(idx, n) {
    const int64_t i = (idx % groups) * kN;
    const int64_t h = (idx / groups) % heads;
    const int64_t row = idx / (groups * heads);
    const int64_t t = positions != nullptr ? positions[row] : row % T_;
    const int64_t base = row * stride + h * HS;
    float x0[kN], x1[kN], y0[kN], y1[kN];
    cuda_ops::LoadFloats<kN>(inp + base + i, x0);
    cuda_ops::LoadFloats<kN>(inp + base + i + half, x1);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float angle = static_cast<float>(t) * freq.v[i + j];
      float sn, c;
      sincosf(angle, &sn, &c);
      sn *= sign;
      y0[j] = x0[j] * c - x1[j] * sn;
      y1[j] = x1[j] * c + x0[j] * sn;
    }
    cuda_ops::StoreFloats<kN>(out + base + i, y0);
    cuda_ops::StoreFloats<kN>(out + base + i + half, y1);
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
  const int64_t rows = s.batch * s.seq_len, pairs = rows * s.heads * (s.head_size / 2);
  constexpr int kN = cuda_ops::kPackElems<T>;
  if ((s.head_size / 2) % kN == 0 && s.stride() % kN == 0 && cuda_ops::AlignedTo(out, 16) &&
      cuda_ops::AlignedTo(inp, 16)) {
    return cuda_ops::LaunchGridStride(stream, pairs / kN, "RopeKernel", RopeKernel<kN, T>, out, inp,
                                      rows, s.seq_len, s.heads, s.head_size, s.stride(),
                                      s.positions, table, sign);
  }
  return cuda_ops::LaunchGridStride(stream, pairs, "RopeKernel", RopeKernel<1, T>, out, inp, rows,
                                    s.seq_len, s.heads, s.head_size, s.stride(), s.positions, table,
                                    sign);
}

template Status RopeCuda<float>(cudaStream_t, float*, const float*, const RopeShape&,
                                const RopeFreq&, float);
template Status RopeCuda<bf16>(cudaStream_t, bf16*, const bf16*, const RopeShape&, const RopeFreq&,
                               float);
template Status RopeCuda<fp16>(cudaStream_t, fp16*, const fp16*, const RopeShape&, const RopeFreq&,
                               float);

}  // namespace tierflow

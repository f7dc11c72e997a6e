// Causal GQA attention on CUDA. bf16/fp16 at the models' head sizes run on
// tensor cores (attention_mma.cu); this file's kernels take the rest (fp32,
// other head sizes up to 256, views not 16-byte aligned), flash-attention style: K/V (or Q/dO)
// tiles of kTile rows are staged in shared memory; each warp owns one query (or key) row and keeps
// its accumulators in registers (8 floats per lane, HS <= 256). Forward uses the online softmax and
// saves only the row logsumexp; backward recomputes the probabilities and runs two kernels, one for
// dq (a warp per query row) and one for dk/dv (a warp per key row, summing over the query heads of
// its group), so every output element is written by exactly one warp: deterministic without
// atomics. No T x T matrix exists anywhere.
#include "kernels/attention.h"

#include <type_traits>

#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;
using cuda_ops::WarpMax;
using cuda_ops::WarpSum;

constexpr int kWarps = 4;  // rows (warps) per block
constexpr int kTile = 32;  // staged rows per tile: one per lane
constexpr int kPerLane = static_cast<int>(kAttentionMaxHeadSizeCuda) / 32;

struct Dims {
  int64_t T, NH, NKV, HS, qs, kvs;
  float scale;
  const int32_t* seq_start;  // (B, T) or null: see attention.h
};

// The first key query i (of batch b) may attend to.
__device__ inline int64_t FirstKey(const Dims& d, int64_t b, int64_t i) {
  return d.seq_start != nullptr && i < d.T ? d.seq_start[b * d.T + i] : 0;
}

// Stages rows [r0, r0 + kTile) of head `head` of x (token stride `stride`) at
// batch b into a padded (kTile, HS + 1) fp32 tile; rows past T become 0.
template <typename T>
__device__ void StageTile(float* tile, const T* x, int64_t b, int64_t head, int64_t stride,
                          int64_t r0, const Dims& d) {
  const int64_t pitch = d.HS + 1;
  for (int64_t e = threadIdx.x; e < kTile * d.HS; e += blockDim.x) {
    const int64_t r = e / d.HS, c = e % d.HS, t = r0 + r;
    tile[r * pitch + c] = t < d.T ? Load(x + (b * d.T + t) * stride + head * d.HS + c) : 0.0f;
  }
}

// The query row of the calling warp in the forward and dq kernels: one warp
// per row i of query head h (kv head g) of batch b.
struct QueryRow {
  int warp, lane;
  int64_t b, h, g;
  int64_t i;
  int64_t last_row;  // the block's last row below T: the keys it needs end there
  bool active;       // i < T
};

__device__ __forceinline__ QueryRow ThisQueryRow(const Dims& d) {
  QueryRow r;
  r.warp = threadIdx.x / 32;
  r.lane = threadIdx.x % 32;
  r.b = blockIdx.z;
  r.h = blockIdx.y;
  r.g = r.h / (d.NH / d.NKV);
  r.i = static_cast<int64_t>(blockIdx.x) * kWarps + r.warp;
  r.last_row = min(d.T - 1, static_cast<int64_t>(blockIdx.x) * kWarps + kWarps - 1);
  r.active = r.i < d.T;
  return r;
}

// Stages the key and value tiles of kv head g from key j0 (StageTile), once
// every warp is done with the previous ones.
template <typename T>
__device__ __forceinline__ void StageKeyValueTiles(float* k_tile, float* v_tile, const T* k,
                                                   const T* v, int64_t b, int64_t g, int64_t j0,
                                                   const Dims& d) {
  __syncthreads();
  StageTile(k_tile, k, b, g, d.kvs, j0, d);
  StageTile(v_tile, v, b, g, d.kvs, j0, d);
  __syncthreads();
}

// acc[r] += w_jj * tile[jj][lane + 32 r] over the kTile rows jj of a staged
// tile (pitch floats apart), in order, w_jj being lane jj's w; columns below
// hs only.
__device__ __forceinline__ void AddTileRows(float (&acc)[kPerLane], float w, const float* tile,
                                            int64_t pitch, int lane, int64_t hs) {
  for (int jj = 0; jj < kTile; ++jj) {
    const float wj = __shfl_sync(0xffffffffu, w, jj);
    const float* row = tile + jj * pitch;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int64_t c = lane + 32 * r;
      if (c < hs) acc[r] += wj * row[c];
    }
  }
}

// The backward's two dot products of a (query, key) pair over the head's hs
// columns, in one pass in column order: s = q . k (q pre-scaled), dp = dout . v.
__device__ __forceinline__ void ScoreAndDp(const float* qr, const float* kr, const float* dor,
                                           const float* vr, int64_t hs, float& s, float& dp) {
  s = 0.0f;
  dp = 0.0f;
  for (int64_t c = 0; c < hs; ++c) {
    s += qr[c] * kr[c];
    dp += dor[c] * vr[c];
  }
}

template <typename T>
static __global__ void __launch_bounds__(kWarps * 32)
    AttentionForwardKernel(T* out, float* lse, const T* q, const T* k, const T* v, Dims d) {
  TF_DYNAMIC_SHARED(float, smem);
  const int64_t pitch = d.HS + 1;
  float* k_tile = smem;                    // (kTile, HS + 1)
  float* v_tile = k_tile + kTile * pitch;  // (kTile, HS + 1)
  float* q_rows = v_tile + kTile * pitch;  // (kWarps, HS)
  const auto [warp, lane, b, h, g, i, last_row, active] = ThisQueryRow(d);
  float* qr = q_rows + warp * d.HS;
  for (int64_t c = lane; c < d.HS; c += 32) {
    qr[c] = active ? Load(q + (b * d.T + i) * d.qs + h * d.HS + c) * d.scale : 0.0f;
  }
  float o[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) o[r] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t first = FirstKey(d, b, i);
  for (int64_t j0 = 0; j0 <= last_row; j0 += kTile) {
    // The first wait also orders q_rows' writes before their reads.
    StageKeyValueTiles(k_tile, v_tile, k, v, b, g, j0, d);
    // Tiles wholly before the row's sample are skipped, so the first tile
    // used holds a valid key and m is finite from then on.
    if (!active || j0 > i || j0 + kTile <= first) continue;
    const int64_t j = j0 + lane;
    const bool valid = j <= i && j >= first;
    float s = -INFINITY;
    if (valid) {
      s = 0.0f;
      const float* kr = k_tile + lane * pitch;
      for (int64_t c = 0; c < d.HS; ++c) s += qr[c] * kr[c];
    }
    const float m_new = fmaxf(m, WarpMax(s));
    const float p = valid ? expf(s - m_new) : 0.0f;
    const float correction = expf(m - m_new);
    l = l * correction + WarpSum(p);
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) o[r] *= correction;
    AddTileRows(o, p, v_tile, pitch, lane, d.HS);
    m = m_new;
  }
  if (!active) return;
  const float inv_l = 1.0f / l;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int64_t c = lane + 32 * r;
    if (c < d.HS) Store(out + ((b * d.T + i) * d.NH + h) * d.HS + c, o[r] * inv_l);
  }
  if (lane == 0) lse[(b * d.NH + h) * d.T + i] = m + logf(l);
}

// dq[i] = scale * sum_{j<=i} p_ij (dp_ij - D_i) k_j, one warp per query row.
template <typename T>
static __global__ void __launch_bounds__(kWarps * 32)
    AttentionBackwardDqKernel(T* dq, const T* dout, const T* q, const T* k, const T* v,
                              const T* out, const float* lse, Dims d) {
  TF_DYNAMIC_SHARED(float, smem);
  const int64_t pitch = d.HS + 1;
  float* k_tile = smem;
  float* v_tile = k_tile + kTile * pitch;
  float* q_rows = v_tile + kTile * pitch;   // (kWarps, HS), pre-scaled
  float* do_rows = q_rows + kWarps * d.HS;  // (kWarps, HS)
  const auto [warp, lane, b, h, g, i, last_row, active] = ThisQueryRow(d);
  float* qr = q_rows + warp * d.HS;
  float* dor = do_rows + warp * d.HS;
  float dot_do_o = 0.0f;
  for (int64_t c = lane; c < d.HS; c += 32) {
    qr[c] = active ? Load(q + (b * d.T + i) * d.qs + h * d.HS + c) * d.scale : 0.0f;
    const int64_t packed = ((b * d.T + i) * d.NH + h) * d.HS + c;
    dor[c] = active ? Load(dout + packed) : 0.0f;
    if (active) dot_do_o += dor[c] * Load(out + packed);
  }
  const float D = WarpSum(dot_do_o);
  const float row_lse = active ? lse[(b * d.NH + h) * d.T + i] : 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) acc[r] = 0.0f;
  const int64_t first = FirstKey(d, b, i);
  for (int64_t j0 = 0; j0 <= last_row; j0 += kTile) {
    StageKeyValueTiles(k_tile, v_tile, k, v, b, g, j0, d);
    if (!active || j0 > i || j0 + kTile <= first) continue;
    const int64_t j = j0 + lane;
    float ds = 0.0f;
    if (j <= i && j >= first) {
      float s, dp;
      ScoreAndDp(qr, k_tile + lane * pitch, dor, v_tile + lane * pitch, d.HS, s, dp);
      ds = expf(s - row_lse) * (dp - D);
    }
    AddTileRows(acc, ds, k_tile, pitch, lane, d.HS);
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int64_t c = lane + 32 * r;
    if (c < d.HS) Store(dq + (b * d.T + i) * d.qs + h * d.HS + c, acc[r] * d.scale);
  }
}

// dv[j] = sum_h sum_{i>=j} p_ij dout_i;  dk[j] = scale * sum_h sum_{i>=j} ds_ij q_i.
// One warp per key row j of kv head g; query tiles staged in shared memory.
template <typename T>
static __global__ void __launch_bounds__(kWarps * 32)
    AttentionBackwardDkvKernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const T* out, const float* lse, Dims d) {
  TF_DYNAMIC_SHARED(float, smem);
  const int64_t pitch = d.HS + 1;
  float* q_tile = smem;                      // (kTile, HS + 1), pre-scaled
  float* do_tile = q_tile + kTile * pitch;   // (kTile, HS + 1)
  float* k_rows = do_tile + kTile * pitch;   // (kWarps, HS)
  float* v_rows = k_rows + kWarps * d.HS;    // (kWarps, HS)
  float* lse_tile = v_rows + kWarps * d.HS;  // (kTile)
  float* d_tile = lse_tile + kTile;          // (kTile)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z, g = blockIdx.y, group = d.NH / d.NKV;
  const int64_t first_key = static_cast<int64_t>(blockIdx.x) * kWarps;
  const int64_t j = first_key + warp;
  const bool active = j < d.T;
  float* kr = k_rows + warp * d.HS;
  float* vr = v_rows + warp * d.HS;
  for (int64_t c = lane; c < d.HS; c += 32) {
    kr[c] = active ? Load(k + (b * d.T + j) * d.kvs + g * d.HS + c) : 0.0f;
    vr[c] = active ? Load(v + (b * d.T + j) * d.kvs + g * d.HS + c) : 0.0f;
  }
  float dk_acc[kPerLane], dv_acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) dk_acc[r] = dv_acc[r] = 0.0f;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = (first_key / kTile) * kTile; i0 < d.T; i0 += kTile) {
      __syncthreads();
      StageTile(q_tile, q, b, h, d.qs, i0, d);
      StageTile(do_tile, dout, b, h, d.NH * d.HS, i0, d);
      // Row terms of this tile: lse and D = dout . out, a warp per row.
      for (int r = warp; r < kTile; r += kWarps) {
        const int64_t t = i0 + r;
        float dot = 0.0f;
        if (t < d.T) {
          for (int64_t c = lane; c < d.HS; c += 32) {
            const int64_t packed = ((b * d.T + t) * d.NH + h) * d.HS + c;
            dot += Load(dout + packed) * Load(out + packed);
          }
        }
        dot = WarpSum(dot);
        if (lane == 0) {
          d_tile[r] = dot;
          lse_tile[r] = t < d.T ? lse[(b * d.NH + h) * d.T + t] : 0.0f;
        }
      }
      __syncthreads();
      for (int64_t e = threadIdx.x; e < kTile * d.HS; e += blockDim.x) {
        q_tile[(e / d.HS) * pitch + e % d.HS] *= d.scale;
      }
      __syncthreads();
      if (!active || i0 + kTile - 1 < j) continue;
      const int64_t i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i >= j && i < d.T && j >= FirstKey(d, b, i)) {
        float s, dp;
        ScoreAndDp(q_tile + lane * pitch, kr, do_tile + lane * pitch, vr, d.HS, s, dp);
        p = expf(s - lse_tile[lane]);
        ds = p * (dp - d_tile[lane]);
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const float pi = __shfl_sync(0xffffffffu, p, ii);
        const float dsi = __shfl_sync(0xffffffffu, ds, ii);
        const float* qr = q_tile + ii * pitch;  // holds q * scale: dk gets its scale here
        const float* dor = do_tile + ii * pitch;
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
          const int64_t c = lane + 32 * r;
          if (c < d.HS) {
            dv_acc[r] += pi * dor[c];
            dk_acc[r] += dsi * qr[c];
          }
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int64_t c = lane + 32 * r;
    if (c < d.HS) {
      Store(dk + (b * d.T + j) * d.kvs + g * d.HS + c, dk_acc[r]);
      Store(dv + (b * d.T + j) * d.kvs + g * d.HS + c, dv_acc[r]);
    }
  }
}

Status CheckCudaShape(const char* op, const AttentionShape& s) {
  TF_RETURN_IF_ERROR(ValidateAttention(op, s));
  if (s.head_size > kAttentionMaxHeadSizeCuda) {
    return InvalidArgumentError(std::string(op) + ": head_size " + std::to_string(s.head_size) +
                                " > " + std::to_string(kAttentionMaxHeadSizeCuda) +
                                " (the CUDA kernels keep a row in registers)");
  }
  if (s.heads > 65535 || s.kv_heads > 65535 || s.batch > 65535) {
    return InvalidArgumentError(std::string(op) + ": batch and heads must be <= 65535");
  }
  return Status::Ok();
}

Dims MakeDims(const AttentionShape& s) {
  return Dims{s.seq_len,
              s.heads,
              s.kv_heads,
              s.head_size,
              s.qs(),
              s.kvs(),
              1.0f / sqrtf(static_cast<float>(s.head_size)),
              s.seq_start};
}

}  // namespace

template <typename T>
Status AttentionForwardCuda(cudaStream_t stream, T* out, float* lse, const T* q, const T* k,
                            const T* v, const AttentionShape& s) {
  TF_RETURN_IF_ERROR(CheckCudaShape("AttentionForwardCuda", s));
  if constexpr (!std::is_same_v<T, float>) {
    if (AttentionMmaApplies(s, {out, q, k, v})) {
      return AttentionForwardMma<T>(stream, out, lse, q, k, v, s);
    }
  }
  const Dims d = MakeDims(s);
  const size_t smem = sizeof(float) * (2 * kTile * (d.HS + 1) + kWarps * d.HS);
  TF_RETURN_IF_ERROR(cuda_ops::AllowDynamicShared(AttentionForwardKernel<T>, smem));
  dim3 grid(static_cast<unsigned int>((s.seq_len + kWarps - 1) / kWarps),
            static_cast<unsigned int>(s.heads), static_cast<unsigned int>(s.batch));
  TF_CUDA_LAUNCH(grid, kWarps * 32, smem, stream, AttentionForwardKernel<T>)(out, lse, q, k, v, d);
  return cuda_ops::CheckLaunch("AttentionForwardKernel");
}

template <typename T>
Status AttentionBackwardCuda(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dout, const T* q,
                             const T* k, const T* v, const T* out, const float* lse,
                             const AttentionShape& s) {
  TF_RETURN_IF_ERROR(CheckCudaShape("AttentionBackwardCuda", s));
  if constexpr (!std::is_same_v<T, float>) {
    if (AttentionMmaApplies(s, {dq, dk, dv, dout, q, k, v, out})) {
      return AttentionBackwardMma<T>(stream, dq, dk, dv, dout, q, k, v, out, lse, s);
    }
  }
  const Dims d = MakeDims(s);
  const unsigned int row_blocks = static_cast<unsigned int>((s.seq_len + kWarps - 1) / kWarps);
  const size_t dq_smem = sizeof(float) * (2 * kTile * (d.HS + 1) + 2 * kWarps * d.HS);
  TF_RETURN_IF_ERROR(cuda_ops::AllowDynamicShared(AttentionBackwardDqKernel<T>, dq_smem));
  dim3 dq_grid(row_blocks, static_cast<unsigned int>(s.heads), static_cast<unsigned int>(s.batch));
  TF_CUDA_LAUNCH(dq_grid, kWarps * 32, dq_smem, stream, AttentionBackwardDqKernel<T>)
  (dq, dout, q, k, v, out, lse, d);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("AttentionBackwardDqKernel"));
  const size_t kv_smem = sizeof(float) * (2 * kTile * (d.HS + 1) + 2 * kWarps * d.HS + 2 * kTile);
  TF_RETURN_IF_ERROR(cuda_ops::AllowDynamicShared(AttentionBackwardDkvKernel<T>, kv_smem));
  dim3 kv_grid(row_blocks, static_cast<unsigned int>(s.kv_heads),
               static_cast<unsigned int>(s.batch));
  TF_CUDA_LAUNCH(kv_grid, kWarps * 32, kv_smem, stream, AttentionBackwardDkvKernel<T>)
  (dk, dv, dout, q, k, v, out, lse, d);
  return cuda_ops::CheckLaunch("AttentionBackwardDkvKernel");
}

#define TF_INSTANTIATE_ATTENTION_CUDA(T)                                                           \
  template Status AttentionForwardCuda<T>(cudaStream_t, T*, float*, const T*, const T*, const T*,  \
                                          const AttentionShape&);                                  \
  template Status AttentionBackwardCuda<T>(cudaStream_t, T*, T*, T*, const T*, const T*, const T*, \
                                           const T*, const T*, const float*,                       \
                                           const AttentionShape&);
TF_INSTANTIATE_ATTENTION_CUDA(float)
TF_INSTANTIATE_ATTENTION_CUDA(bf16)
TF_INSTANTIATE_ATTENTION_CUDA(fp16)

}  // namespace tierflow

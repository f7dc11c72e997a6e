// Causal GQA attention on tensor cores: see attention_mma.cuh.
//
// A block is 4 warps; each warp owns 16 rows (query rows in forward and dq,
// key rows in dk/dv) and runs mma.sync.m16n8k16 on fragments read from
// shared-memory tiles of 16-bit rows (padded by 8 elements, so fragment
// reads are free of bank conflicts). Forward keeps Q's fragments, the score
// tile and the output in registers, with the online softmax in the exp2
// domain; the probabilities are rounded to the storage type for the P V
// product (as flash-attention does), the row sums stay fp32. Backward
// recomputes P from the forward's log-sum-exp, and rounds dS likewise.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16/.f16), for lane
// = 4 g + t (g = group 0..7, t = thread in group 0..3):
//   A (16x16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] =
//     (g, 2t+8..), a[3] = (g+8, 2t+8..); each register two consecutive
//     columns, the lower column in the low half.
//   B (16x8, k x n): b0 = (k = 2t, 2t+1; n = g), b1 = (k = 2t+8, 2t+9; n = g).
//   C (16x8 fp32): c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1).
// So the C tiles of two adjacent 8-column blocks are, packed in pairs, the
// A fragment of one 16-column block (the P and dS products need no shuffle).
#include "kernels/cuda/attention_mma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::WarpSum;

constexpr int kThreads = 128;  // 4 warps
constexpr int kRows = 64;      // rows a block owns: 16 per warp
constexpr int kPad = 8;        // elements of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kForwardKeys = 64;   // forward: key rows per tile
constexpr int kBackwardTile = 32;  // dq: key rows per tile; dk/dv: query rows per tile

// A kernel's dynamic shared memory: tiles of kTileRows rows of HS 16-bit
// elements (pitch HS + kPad), one after another. The launch asks for kBytes;
// the kernel takes the tiles' starts from Carve().
template <int HS, int... kTileRows>
struct SharedTiles {
  static constexpr int kPitch = HS + kPad;
  static constexpr size_t kBytes = (size_t{0} + ... + kTileRows) * kPitch * sizeof(uint16_t);
  static __device__ __forceinline__ std::array<uint16_t*, sizeof...(kTileRows)> Carve() {
    TF_DYNAMIC_SHARED(uint16_t, smem);
    std::array<uint16_t*, sizeof...(kTileRows)> tiles{};
    uint16_t* next = smem;
    size_t i = 0;
    ((tiles[i++] = next, next += kTileRows * kPitch), ...);
    return tiles;
  }
};
template <int HS>
using ForwardTiles = SharedTiles<HS, kRows, kForwardKeys, kForwardKeys>;  // q, k, v
template <int HS>
using DqTiles = SharedTiles<HS, kRows, kRows, kBackwardTile, kBackwardTile>;  // q, dout, k, v
template <int HS>
using DkvTiles = SharedTiles<HS, kRows, kRows, kBackwardTile, kBackwardTile>;  // k, v, q, dout

struct Dims {
  int64_t T, NH, NKV, qs, kvs;
  float scale;
  const int32_t* seq_start;
};

__device__ __forceinline__ int64_t FirstKey(const Dims& d, int64_t b, int64_t i) {
  return d.seq_start != nullptr && i < d.T ? d.seq_start[b * d.T + i] : 0;
}

// c += a b on the tensor cores: mma.sync m16n8k16, fp32 accumulate, inputs of
// PTX type `type` ("bf16" or "f16"). A macro: asm takes only a string literal.
#define TF_MMA_M16N8K16(type, c, a, b0, b1)                          \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." type "." type         \
      ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

// The tensor-core product and the packing of two fp32 values into a register
// of T pairs, for T = bf16 or fp16.
template <typename T>
struct Mma {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  static constexpr bool kBf16 = std::is_same_v<T, bf16>;
  static __device__ __forceinline__ void Run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (kBf16) {
      TF_MMA_M16N8K16("bf16", c, a, b0, b1);
    } else {
      TF_MMA_M16N8K16("f16", c, a, b0, b1);
    }
#elif defined(TIERFLOW_CUDA_EMULATION)
    cuda_emu::MmaM16N8K16(kBf16, c, a, b0, b1);
#else
    __trap();  // AttentionMmaApplies refuses GPUs before sm_80
#endif
  }
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    if constexpr (kBf16) {
      __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<uint32_t*>(&v);
    } else {
      __half2 v = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<uint32_t*>(&v);
    }
  }
};

#undef TF_MMA_M16N8K16

// Stages rows [row0, row0 + kN) of head `head` of x (token stride `stride`
// elements, batch b) into tile (pitch HS + kPad), 16 bytes per thread and
// step; rows at or past T become zeros.
template <int HS, int kN>
__device__ __forceinline__ void StageRows(uint16_t* tile, const uint16_t* x, int64_t b,
                                          int64_t head, int64_t stride, int64_t row0, int64_t T) {
  constexpr int kChunks = HS / 8;
  constexpr int kPitch = HS + kPad;
  for (int e = threadIdx.x; e < kN * kChunks; e += kThreads) {
    const int r = e / kChunks, c = (e % kChunks) * 8;
    const int64_t t = row0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (t < T) val = *reinterpret_cast<const uint4*>(x + (b * T + t) * stride + head * HS + c);
    *reinterpret_cast<uint4*>(tile + r * kPitch + c) = val;
  }
}

__device__ __forceinline__ uint32_t Word(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// A fragment of rows [r0, r0 + 16), columns [c0, c0 + 16) of a tile.
template <int kPitch>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const uint16_t* tile, int r0, int c0, int g,
                                      int t) {
  const uint16_t* p = tile + (r0 + g) * kPitch + c0 + 2 * t;
  a[0] = Word(p);
  a[1] = Word(p + 8 * kPitch);
  a[2] = Word(p + 8);
  a[3] = Word(p + 8 * kPitch + 8);
}

// B fragment with B[k][n] = tile[n0 + n][k0 + k]: the tile's rows are the
// product's columns (K in Q K^T).
template <int kPitch>
__device__ __forceinline__ void LoadBRows(uint32_t& b0, uint32_t& b1, const uint16_t* tile, int n0,
                                          int k0, int g, int t) {
  const uint16_t* p = tile + (n0 + g) * kPitch + k0 + 2 * t;
  b0 = Word(p);
  b1 = Word(p + 8);
}

// ldmatrix.sync.aligned.m8n8.x4.trans: four 8x8 matrices of 16-bit elements
// whose rows lanes 8m..8m+7 address (matrix m, 16-byte aligned rows); r[m]
// gets matrix m's elements (2t, g) and (2t + 1, g), transposed as loaded.
__device__ __forceinline__ void LoadMatrixX4Trans(uint32_t (&r)[4], const uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#elif defined(TIERFLOW_CUDA_EMULATION)
  cuda_emu::LoadMatrixX4Trans(r, row);
#else
  __trap();    // AttentionMmaApplies refuses GPUs before sm_80
#endif
}

// The B fragments of two adjacent 8-column blocks, B[k][n] = tile[k0 + k][n0
// + n] and tile[k0 + k][n0 + 8 + n] (the tile's rows are the reduction: V in
// P V): b[0..1] for columns n0.., b[2..3] for n0 + 8... One ldmatrix.trans in
// place of eight 16-bit shared loads: matrix m is rows k0 + 8 (m & 1),
// columns n0 + 8 (m >> 1).
template <int kPitch>
__device__ __forceinline__ void LoadBColsPair(uint32_t (&b)[4], const uint16_t* tile, int k0,
                                              int n0, int lane) {
  const int m = lane / 8;
  LoadMatrixX4Trans(b, tile + (k0 + (m & 1) * 8 + lane % 8) * kPitch + n0 + (m >> 1) * 8);
}

// The A fragment made of two adjacent C tiles (columns 0-7 and 8-15).
template <typename T>
__device__ __forceinline__ void CToA(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = Mma<T>::Pack(lo[0], lo[1]);
  a[1] = Mma<T>::Pack(lo[2], lo[3]);
  a[2] = Mma<T>::Pack(hi[0], hi[1]);
  a[3] = Mma<T>::Pack(hi[2], hi[3]);
}

__device__ __forceinline__ float GroupMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float GroupSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ int64_t WarpMin(int64_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other < v ? other : v;
  }
  return v;
}

// The smallest first key over rows [row0, row0 + kRows) (T when none is
// below T), shared by the block; `slot` is one shared int.
__device__ __forceinline__ int64_t BlockFirstKey(const Dims& d, int64_t b, int64_t row0,
                                                 int* slot) {
  if (threadIdx.x == 0) *slot = INT_MAX;
  __syncthreads();
  if (threadIdx.x < kRows && row0 + threadIdx.x < d.T) {
    atomicMin(slot, static_cast<int>(FirstKey(d, b, row0 + threadIdx.x)));
  }
  __syncthreads();
  return *slot;
}

// Stores a warp's 16 x HS fp32 accumulator tile, times `mul`, as T pairs at
// rows rowA (c[0..1]) and rowA + 8 (c[2..3]).
template <typename T, int HS>
__device__ __forceinline__ void StoreRows(T* base_a, T* base_b, bool a_ok, bool b_ok,
                                          const float (&acc)[HS / 8][4], float mul_a, float mul_b,
                                          int t) {
#pragma unroll
  for (int dt = 0; dt < HS / 8; ++dt) {
    const int c = dt * 8 + 2 * t;
    if (a_ok) {
      *reinterpret_cast<uint32_t*>(base_a + c) =
          Mma<T>::Pack(acc[dt][0] * mul_a, acc[dt][1] * mul_a);
    }
    if (b_ok) {
      *reinterpret_cast<uint32_t*>(base_b + c) =
          Mma<T>::Pack(acc[dt][2] * mul_b, acc[dt][3] * mul_b);
    }
  }
}

// The query rows of a forward or dq block (64 from q0) as one thread holds
// them (rows row_a and row_a + 8 of its warp's 16), with the keys they see:
// first keys per row (packed samples), the warp's and the block's key range.
struct QueryRows {
  int64_t T, row_a, row_b, first_a, first_b, warp_first, warp_last, block_first, block_last;
  // Every thread of the block calls it (BlockFirstKey synchronises).
  __device__ QueryRows(const Dims& d, int64_t b, int64_t q0, int warp, int g, int* first_slot)
      : T(d.T),
        row_a(q0 + warp * 16 + g),
        row_b(row_a + 8),
        first_a(FirstKey(d, b, row_a)),
        first_b(FirstKey(d, b, row_b)),
        warp_first(WarpMin(first_a < first_b ? first_a : first_b)),
        warp_last(min(d.T - 1, q0 + warp * 16 + 15)),
        block_first(BlockFirstKey(d, b, q0, first_slot)),
        block_last(min(d.T - 1, q0 + kRows - 1)) {}
  // The first key tile of `keys` any row of the block sees.
  __device__ int64_t FirstTile(int keys) const { return block_first / keys * keys; }
  // No row of the warp sees a key of tile [j0, j0 + keys). Warp-uniform.
  __device__ bool WarpSkips(int64_t j0, int keys) const {
    return j0 > warp_last || j0 + keys <= warp_first;
  }
  // Key j is in row_a's (row_b's) causal window within its sample.
  __device__ bool SeesA(int64_t j) const { return row_a < T && j <= row_a && j >= first_a; }
  __device__ bool SeesB(int64_t j) const { return row_b < T && j <= row_b && j >= first_b; }
  // f(nt, e, sees_a, sees_b) for each element pair of the thread's score
  // fragments s[kNT][4] over key tile j0: s[nt][e] (row_a) and s[nt][2 + e]
  // (row_b) hold key j0 + nt * 8 + 2 t + e, seen by row_a / row_b or not.
  template <int kNT, typename F>
  __device__ __forceinline__ void ForEachScore(int64_t j0, int t, const F& f) const {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t j = j0 + nt * 8 + 2 * t + e;
        f(nt, e, SeesA(j), SeesB(j));
      }
    }
  }
};

// The calling thread's place in a forward or dq block: its warp, the
// fragment row g and column pair t of its lane, the block's first query row
// q0 (the last query blocks have the most keys: they start first), batch b,
// query head h and its kv head grp.
struct QueryBlockThread {
  int warp, g, t;
  int64_t q0, b, h, grp;
};

__device__ __forceinline__ QueryBlockThread ThisQueryBlockThread(const Dims& d) {
  QueryBlockThread p;
  p.warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  p.g = lane >> 2;
  p.t = lane & 3;
  p.q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;
  p.b = blockIdx.z;
  p.h = blockIdx.y;
  p.grp = p.h / (d.NH / d.NKV);
  return p;
}

// Stages key and value tiles of kKeys rows from j0 (StageRows), once the
// block is done with the previous ones.
template <typename T, int HS, int kKeys>
__device__ __forceinline__ void StageKeyValueTiles(uint16_t* k_s, uint16_t* v_s, const T* k,
                                                   const T* v, int64_t b, int64_t grp, int64_t j0,
                                                   const Dims& d) {
  __syncthreads();
  StageRows<HS, kKeys>(k_s, reinterpret_cast<const uint16_t*>(k), b, grp, d.kvs, j0, d.T);
  StageRows<HS, kKeys>(v_s, reinterpret_cast<const uint16_t*>(v), b, grp, d.kvs, j0, d.T);
  __syncthreads();
}

// Zeroes a warp's C fragments.
template <int kN>
__device__ __forceinline__ void ZeroFragments(float (&c)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

// c[nt] += A B for the warp's 16 rows: A's fragments a[kt] (columns
// kt * 16..), B[k][n] = tile[nt * 8 + n][kt * 16 + k] (LoadBRows): Q K^T.
template <typename T, int kPitch, int kKT, int kNT>
__device__ __forceinline__ void AddTimesRowsT(float (&c)[kNT][4], const uint32_t (&a)[kKT][4],
                                              const uint16_t* tile, int g, int t) {
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      uint32_t b0, b1;
      LoadBRows<kPitch>(b0, b1, tile, nt * 8, kt * 16, g, t);
      Mma<T>::Run(c[nt], a[kt], b0, b1);
    }
  }
}

// c[dt] += P B for the warp's 16 rows: P the C fragments p over kK columns,
// rounded to T (CToA), B[k][n] = tile[k][dt * 8 + n] (LoadBColsPair, two
// column blocks at a time: kDT = HS / 8 is even): P V.
template <typename T, int kPitch, int kK, int kDT>
__device__ __forceinline__ void AddProductTimesTile(float (&c)[kDT][4], const float (&p)[kK / 8][4],
                                                    const uint16_t* tile, int g, int t) {
  static_assert(kDT % 2 == 0);
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    uint32_t a[4];
    CToA<T>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int dt = 0; dt < kDT; dt += 2) {
      uint32_t b[4];
      LoadBColsPair<kPitch>(b, tile, kk * 16, dt * 8, 4 * g + t);
      Mma<T>::Run(c[dt], a, b[0], b[1]);
      Mma<T>::Run(c[dt + 1], a, b[2], b[3]);
    }
  }
}

// ---- forward: a block per 64 query rows of one head, key tiles of 64 ----
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads, 1)
    ForwardKernel(T* out, float* lse, const T* q, const T* k, const T* v, Dims d) {
  constexpr int kPitch = HS + kPad, kKT = HS / 16, kDT = HS / 8;
  constexpr int kKeys = kForwardKeys, kNT = kKeys / 8;
  const auto [q_s, k_s, v_s] = ForwardTiles<HS>::Carve();
  __shared__ int first_slot;
  const auto [warp, g, t, q0, b, h, grp] = ThisQueryBlockThread(d);
  const QueryRows rows(d, b, q0, warp, g, &first_slot);

  StageRows<HS, kRows>(q_s, reinterpret_cast<const uint16_t*>(q), b, h, d.qs, q0, d.T);
  __syncthreads();
  uint32_t qa[kKT][4];
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt) LoadA<kPitch>(qa[kt], q_s, warp * 16, kt * 16, g, t);

  float o[kDT][4];
  ZeroFragments(o);
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const float scale_log2 = d.scale * kLog2e;

  for (int64_t j0 = rows.FirstTile(kKeys); j0 <= rows.block_last; j0 += kKeys) {
    StageKeyValueTiles<T, HS, kKeys>(k_s, v_s, k, v, b, grp, j0, d);
    if (rows.WarpSkips(j0, kKeys)) continue;

    float s[kNT][4];
    ZeroFragments(s);
    AddTimesRowsT<T, kPitch>(s, qa, k_s, g, t);
    float mx_a = -INFINITY, mx_b = -INFINITY;
    rows.ForEachScore<kNT>(j0, t, [&](int nt, int e, bool ok_a, bool ok_b) {
      s[nt][e] = ok_a ? s[nt][e] * scale_log2 : -INFINITY;
      s[nt][2 + e] = ok_b ? s[nt][2 + e] * scale_log2 : -INFINITY;
      mx_a = fmaxf(mx_a, s[nt][e]);
      mx_b = fmaxf(mx_b, s[nt][2 + e]);
    });
    const float new_a = fmaxf(m_a, GroupMax(mx_a)), new_b = fmaxf(m_b, GroupMax(mx_b));
    // A row with no key yet keeps zeros (exp2(-inf) = 0) and no NaN.
    const float base_a = new_a == -INFINITY ? 0.0f : new_a;
    const float base_b = new_b == -INFINITY ? 0.0f : new_b;
    const float alpha_a = exp2f(m_a - base_a), alpha_b = exp2f(m_b - base_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = exp2f(s[nt][e] - base_a);
        s[nt][2 + e] = exp2f(s[nt][2 + e] - base_b);
        sum_a += s[nt][e];
        sum_b += s[nt][2 + e];
      }
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      o[dt][0] *= alpha_a;
      o[dt][1] *= alpha_a;
      o[dt][2] *= alpha_b;
      o[dt][3] *= alpha_b;
    }
    AddProductTimesTile<T, kPitch, kKeys>(o, s, v_s, g, t);
  }
  l_a = GroupSum(l_a);
  l_b = GroupSum(l_b);
  const bool ok_a = rows.row_a < d.T, ok_b = rows.row_b < d.T;
  T* out_a = out + ((b * d.T + rows.row_a) * d.NH + h) * HS;
  T* out_b = out + ((b * d.T + rows.row_b) * d.NH + h) * HS;
  StoreRows<T, HS>(out_a, out_b, ok_a, ok_b, o, ok_a ? 1.0f / l_a : 0.0f, ok_b ? 1.0f / l_b : 0.0f,
                   t);
  if (t == 0) {
    if (ok_a) lse[(b * d.NH + h) * d.T + rows.row_a] = (m_a + log2f(l_a)) * kLn2;
    if (ok_b) lse[(b * d.NH + h) * d.T + rows.row_b] = (m_b + log2f(l_b)) * kLn2;
  }
}

// The rows' D = dout . out (fp32 over the storage values) and lse * log2(e)
// for kN rows of head h from row0, a warp per row; rows past T get zeros.
template <typename T, int HS, int kN>
__device__ __forceinline__ void RowTerms(float* d_s, float* lse_s, const T* dout, const T* out,
                                         const float* lse, int64_t b, int64_t h, int64_t row0,
                                         const Dims& d) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kN; r += kThreads / 32) {
    const int64_t i = row0 + r;
    float dot = 0.0f;
    if (i < d.T) {
      const int64_t base = ((b * d.T + i) * d.NH + h) * HS;
      for (int c = lane; c < HS; c += 32) dot += Load(dout + base + c) * Load(out + base + c);
    }
    dot = WarpSum(dot);
    if (lane == 0) {
      d_s[r] = dot;
      lse_s[r] = i < d.T ? lse[(b * d.NH + h) * d.T + i] * kLog2e : 0.0f;
    }
  }
}

// ---- backward dq: a block per 64 query rows of one head, key tiles of 32 ----
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads, 1)
    BackwardDqKernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const T* out,
                     const float* lse, Dims d) {
  constexpr int kPitch = HS + kPad, kKT = HS / 16, kDT = HS / 8;
  constexpr int kKeys = kBackwardTile, kNT = kKeys / 8;
  const auto [q_s, do_s, k_s, v_s] = DqTiles<HS>::Carve();
  __shared__ float d_s[kRows], lse_s[kRows];
  __shared__ int first_slot;
  const auto [warp, g, t, q0, b, h, grp] = ThisQueryBlockThread(d);
  const QueryRows rows(d, b, q0, warp, g, &first_slot);

  StageRows<HS, kRows>(q_s, reinterpret_cast<const uint16_t*>(q), b, h, d.qs, q0, d.T);
  StageRows<HS, kRows>(do_s, reinterpret_cast<const uint16_t*>(dout), b, h, d.NH * HS, q0, d.T);
  RowTerms<T, HS, kRows>(d_s, lse_s, dout, out, lse, b, h, q0, d);
  __syncthreads();
  uint32_t qa[kKT][4], da[kKT][4];
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt) {
    LoadA<kPitch>(qa[kt], q_s, warp * 16, kt * 16, g, t);
    LoadA<kPitch>(da[kt], do_s, warp * 16, kt * 16, g, t);
  }
  const float dd_a = d_s[warp * 16 + g], dd_b = d_s[warp * 16 + g + 8];
  const float lse_a = lse_s[warp * 16 + g], lse_b = lse_s[warp * 16 + g + 8];
  const float scale_log2 = d.scale * kLog2e;
  float acc[kDT][4];
  ZeroFragments(acc);

  for (int64_t j0 = rows.FirstTile(kKeys); j0 <= rows.block_last; j0 += kKeys) {
    StageKeyValueTiles<T, HS, kKeys>(k_s, v_s, k, v, b, grp, j0, d);
    if (rows.WarpSkips(j0, kKeys)) continue;

    float s[kNT][4], dp[kNT][4];
    ZeroFragments(s);
    ZeroFragments(dp);
    AddTimesRowsT<T, kPitch>(s, qa, k_s, g, t);
    AddTimesRowsT<T, kPitch>(dp, da, v_s, g, t);
    // dS = P (dP - D), P = exp(s * scale - lse); held in s.
    rows.ForEachScore<kNT>(j0, t, [&](int nt, int e, bool ok_a, bool ok_b) {
      const float p_a = ok_a ? exp2f(s[nt][e] * scale_log2 - lse_a) : 0.0f;
      const float p_b = ok_b ? exp2f(s[nt][2 + e] * scale_log2 - lse_b) : 0.0f;
      s[nt][e] = p_a * (dp[nt][e] - dd_a);
      s[nt][2 + e] = p_b * (dp[nt][2 + e] - dd_b);
    });
    AddProductTimesTile<T, kPitch, kKeys>(acc, s, k_s, g, t);
  }
  StoreRows<T, HS>(dq + (b * d.T + rows.row_a) * d.qs + h * HS,
                   dq + (b * d.T + rows.row_b) * d.qs + h * HS, rows.row_a < d.T, rows.row_b < d.T,
                   acc, d.scale, d.scale, t);
}

// ---- backward dk, dv: a block per 64 keys of one KV head, over the
// group's query heads in tiles of 32 queries ----
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads, 1)
    BackwardDkvKernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                      const float* lse, Dims d) {
  constexpr int kPitch = HS + kPad, kKT = HS / 16, kDT = HS / 8;
  constexpr int kQueries = kBackwardTile, kNT = kQueries / 8;
  const auto [k_s, v_s, q_s, do_s] = DkvTiles<HS>::Carve();
  __shared__ float d_s[kQueries], lse_s[kQueries];
  __shared__ int first_s[kQueries];
  __shared__ int tile_first;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t b = blockIdx.z, grp = blockIdx.y, group = d.NH / d.NKV;
  const int64_t key_a = k0 + warp * 16 + g, key_b = key_a + 8;
  const int64_t warp_first_key = k0 + warp * 16;
  const int64_t warp_last_key = min(d.T - 1, warp_first_key + 15);
  const int64_t block_last_key = min(d.T - 1, k0 + kRows - 1);

  StageRows<HS, kRows>(k_s, reinterpret_cast<const uint16_t*>(k), b, grp, d.kvs, k0, d.T);
  StageRows<HS, kRows>(v_s, reinterpret_cast<const uint16_t*>(v), b, grp, d.kvs, k0, d.T);
  const float scale_log2 = d.scale * kLog2e;
  float dk_acc[kDT][4], dv_acc[kDT][4];
  ZeroFragments(dk_acc);
  ZeroFragments(dv_acc);

  for (int64_t h = grp * group; h < (grp + 1) * group; ++h) {
    for (int64_t i0 = k0 / kQueries * kQueries; i0 < d.T; i0 += kQueries) {
      __syncthreads();  // the previous query tile is consumed (and k_s, v_s staged)
      if (threadIdx.x == 0) tile_first = INT_MAX;
      __syncthreads();
      if (threadIdx.x < kQueries) {
        const int64_t i = i0 + threadIdx.x;
        const int first = i < d.T ? static_cast<int>(FirstKey(d, b, i)) : INT_MAX;
        first_s[threadIdx.x] = first;
        atomicMin(&tile_first, first);
      }
      __syncthreads();
      // Every query of the tile in a sample after the block's keys (packed
      // rows): nothing to stage. Block-uniform.
      if (tile_first > block_last_key) continue;
      StageRows<HS, kQueries>(q_s, reinterpret_cast<const uint16_t*>(q), b, h, d.qs, i0, d.T);
      StageRows<HS, kQueries>(do_s, reinterpret_cast<const uint16_t*>(dout), b, h, d.NH * HS, i0,
                              d.T);
      RowTerms<T, HS, kQueries>(d_s, lse_s, dout, out, lse, b, h, i0, d);
      __syncthreads();
      // Every query of the tile before this warp's keys, or every one in a
      // later sample than the warp's keys: nothing to add. Warp-uniform.
      if (i0 + kQueries - 1 < warp_first_key || tile_first > warp_last_key) continue;

      float s[kNT][4], dp[kNT][4];  // transposed: rows are keys, columns queries
      ZeroFragments(s);
      ZeroFragments(dp);
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt) {
        uint32_t ka[4], va[4];
        LoadA<kPitch>(ka, k_s, warp * 16, kt * 16, g, t);
        LoadA<kPitch>(va, v_s, warp * 16, kt * 16, g, t);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t b0, b1;
          LoadBRows<kPitch>(b0, b1, q_s, nt * 8, kt * 16, g, t);
          Mma<T>::Run(s[nt], ka, b0, b1);
          LoadBRows<kPitch>(b0, b1, do_s, nt * 8, kt * 16, g, t);
          Mma<T>::Run(dp[nt], va, b0, b1);
        }
      }
      // s <- P^T, dp <- dS^T.
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = nt * 8 + 2 * t + e;
          const int64_t i = i0 + col;
          const bool ok_a = i < d.T && i >= key_a && key_a >= first_s[col];
          const bool ok_b = i < d.T && i >= key_b && key_b >= first_s[col];
          const float p_a = ok_a ? exp2f(s[nt][e] * scale_log2 - lse_s[col]) : 0.0f;
          const float p_b = ok_b ? exp2f(s[nt][2 + e] * scale_log2 - lse_s[col]) : 0.0f;
          s[nt][e] = p_a;
          s[nt][2 + e] = p_b;
          dp[nt][e] = p_a * (dp[nt][e] - d_s[col]);
          dp[nt][2 + e] = p_b * (dp[nt][2 + e] - d_s[col]);
        }
      }
      AddProductTimesTile<T, kPitch, kQueries>(dv_acc, s, do_s, g, t);  // P^T dO
      AddProductTimesTile<T, kPitch, kQueries>(dk_acc, dp, q_s, g, t);  // dS^T Q
    }
  }
  const bool ok_a = key_a < d.T, ok_b = key_b < d.T;
  const int64_t off_a = (b * d.T + key_a) * d.kvs + grp * HS;
  const int64_t off_b = (b * d.T + key_b) * d.kvs + grp * HS;
  StoreRows<T, HS>(dk + off_a, dk + off_b, ok_a, ok_b, dk_acc, d.scale, d.scale, t);
  StoreRows<T, HS>(dv + off_a, dv + off_b, ok_a, ok_b, dv_acc, 1.0f, 1.0f, t);
}

Dims MakeDims(const AttentionShape& s) {
  return Dims{s.seq_len,  s.heads, s.kv_heads,
              s.qs(),     s.kvs(), 1.0f / sqrtf(static_cast<float>(s.head_size)),
              s.seq_start};
}

// Launches `kernel` with a block per kRows rows of each head and sample and
// smem_bytes of dynamic shared memory (allowing it past 48 KiB first), and
// checks the launch, naming `what`.
template <typename... Params, typename... Args>
Status LaunchTiles(cudaStream_t stream, int64_t rows, int64_t heads, int64_t batch,
                   size_t smem_bytes, const char* what, void (*kernel)(Params...),
                   const Args&... args) {
  TF_RETURN_IF_ERROR(cuda_ops::AllowDynamicShared(kernel, smem_bytes));
  const dim3 grid(static_cast<unsigned int>((rows + kRows - 1) / kRows),
                  static_cast<unsigned int>(heads), static_cast<unsigned int>(batch));
  TF_CUDA_LAUNCH(grid, kThreads, smem_bytes, stream, kernel)(args...);
  return cuda_ops::CheckLaunch(what);
}

template <typename T, int HS>
Status Forward(cudaStream_t stream, T* out, float* lse, const T* q, const T* k, const T* v,
               const AttentionShape& s) {
  return LaunchTiles(stream, s.seq_len, s.heads, s.batch, ForwardTiles<HS>::kBytes,
                     "attention ForwardKernel (tensor cores)", ForwardKernel<T, HS>, out, lse, q, k,
                     v, MakeDims(s));
}

template <typename T, int HS>
Status Backward(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                const T* v, const T* out, const float* lse, const AttentionShape& s) {
  const Dims d = MakeDims(s);
  TF_RETURN_IF_ERROR(LaunchTiles(stream, s.seq_len, s.heads, s.batch, DqTiles<HS>::kBytes,
                                 "attention BackwardDqKernel (tensor cores)",
                                 BackwardDqKernel<T, HS>, dq, dout, q, k, v, out, lse, d));
  return LaunchTiles(stream, s.seq_len, s.kv_heads, s.batch, DkvTiles<HS>::kBytes,
                     "attention BackwardDkvKernel (tensor cores)", BackwardDkvKernel<T, HS>, dk, dv,
                     dout, q, k, v, out, lse, d);
}

// The current device's compute capability major (0 when it cannot be read),
// asked on every call: a thread may switch devices, and the query is cheap.
int ComputeMajor() {
#ifdef TIERFLOW_CUDA_EMULATION
  return 8;  // the emulator runs mma.sync as sm_80 does
#endif
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return 0;
  }
  return major;
}

}  // namespace

bool AttentionMmaApplies(const AttentionShape& s, std::initializer_list<const void*> pointers) {
  const int64_t hs = s.head_size;
  if (hs != 32 && hs != 64 && hs != 96 && hs != 128) return false;
  if (s.qs() % 8 != 0 || s.kvs() % 8 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  if (s.seq_len > INT_MAX) return false;  // first keys are compared as int
  return ComputeMajor() >= 8;
}

namespace {

// f(std::integral_constant<int, HS>{}) for the head sizes with kernels; for
// another, InvalidArgument naming `op`.
template <typename F>
Status WithHeadSize(const char* op, int64_t head_size, const F& f) {
  switch (head_size) {
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 96:
      return f(std::integral_constant<int, 96>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return InvalidArgumentError(std::string(op) + ": head_size " + std::to_string(head_size) +
                                  " has no tensor-core kernel");
  }
}

}  // namespace

template <typename T>
Status AttentionForwardMma(cudaStream_t stream, T* out, float* lse, const T* q, const T* k,
                           const T* v, const AttentionShape& s) {
  return WithHeadSize("AttentionForwardMma", s.head_size, [&](auto hs) {
    return Forward<T, decltype(hs)::value>(stream, out, lse, q, k, v, s);
  });
}

template <typename T>
Status AttentionBackwardMma(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dout, const T* q,
                            const T* k, const T* v, const T* out, const float* lse,
                            const AttentionShape& s) {
  return WithHeadSize("AttentionBackwardMma", s.head_size, [&](auto hs) {
    return Backward<T, decltype(hs)::value>(stream, dq, dk, dv, dout, q, k, v, out, lse, s);
  });
}

#define TF_INSTANTIATE_ATTENTION_MMA(T)                                                           \
  template Status AttentionForwardMma<T>(cudaStream_t, T*, float*, const T*, const T*, const T*,  \
                                         const AttentionShape&);                                  \
  template Status AttentionBackwardMma<T>(cudaStream_t, T*, T*, T*, const T*, const T*, const T*, \
                                          const T*, const T*, const float*,                       \
                                          const AttentionShape&);
TF_INSTANTIATE_ATTENTION_MMA(bf16)
TF_INSTANTIATE_ATTENTION_MMA(fp16)

}  // namespace tierflow

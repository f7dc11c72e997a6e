// Internal to the transformer model: the dimensions of one run, the device
// buffers of one block's activations, and the templated forward/backward of a
// block, the head and the linear layers (T = float, bf16 or fp16). Everything
// is enqueued on a stream through the kernels' dispatching entry points.
#pragma once

#include "kernels/rope_freq.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "model/grad_pieces.h"
#include "model/param_layout.h"
#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow::model_internal {

// Sizes of one micro-batch's run. N = B * T rows; Q = NH * HS query width,
// KV = NKV * HS key/value width.
struct Dims {
  int64_t B = 0, T = 0, N = 0;
  int64_t C = 0, NH = 0, NKV = 0, HS = 0, Q = 0, KV = 0, F = 0, V = 0;
  bool conv1d = false;     // GPT-2: weights stored (in, out), fused qkv
  bool layernorm = false;  // LayerNorm (else RMSNorm)
  bool swiglu = false;     // SwiGLU MLP (else GELU)
  bool rope = false;
  float eps = 1e-5f;
  RopeFreq rope_freq;  // theta and rope_scaling (Llama family)
  // Packed samples (MicroBatch::positions): device arrays (N) of each token's
  // position in its sample and the row index where its sample starts; null
  // for plain rows (positions 0..T-1, attention over the whole row).
  const int32_t* positions = nullptr;
  const int32_t* seq_start = nullptr;
  // The MLP's row tile (TrainShape::mlp_tile_rows): 0 = all N rows at once;
  // else tiles of this many rows (a multiple of kGemmCpuKPanel), the (N, F)
  // buffers below then (tile, F), and backward recomputes each tile's
  // fc/up/act from ln2 (BlockActs' MLP buffers hold only the last tile).
  int64_t mlp_rows = 0;
  int64_t MlpTile() const { return mlp_rows > 0 ? mlp_rows : N; }
};

Dims MakeDims(const ModelConfig& config, int64_t batch, int64_t seq_len);

// One block's saved activations (device memory; T unless fp32 noted).
struct BlockActs {
  void* ln1 = nullptr;        // (N, C) norm1 output
  float* ln1_mean = nullptr;  // (N) LayerNorm only
  float* ln1_rstd = nullptr;  // (N)
  void* qkv = nullptr;        // (N, Q + 2 KV): GPT-2 interleaved per token (N, 3C);
                              // Llama three packed blocks q (N, Q), k (N, KV), v (N, KV), roped
  void* att = nullptr;        // (N, Q) attention output
  float* lse = nullptr;       // (B, NH, T)
  void* mid = nullptr;        // (N, C) residual after attention
  void* ln2 = nullptr;        // (N, C)
  float* ln2_mean = nullptr;  // (N)
  float* ln2_rstd = nullptr;  // (N)
  // The MLP's: (N, F), or (tile, F) shared by all blocks when tiled.
  void* fc = nullptr;   // GPT-2 c_fc output (pre-GELU) / Llama gate
  void* up = nullptr;   // Llama up
  void* act = nullptr;  // GELU(fc) / SwiGLU(gate, up)
};

// Backward scratch shared by all blocks.
struct BlockScratch {
  void* dln = nullptr;    // (N, C)
  void* datt = nullptr;   // (N, Q)
  void* dqkv = nullptr;   // (N, Q + 2 KV), arranged like BlockActs::qkv
  void* dact = nullptr;   // (N, F), (tile, F) when tiled
  void* dgate = nullptr;  // the same, Llama
  void* dup = nullptr;    // the same, Llama
};

// out (N, C) = block(x). `w` is the block unit's weights. With `mlp` false
// (checkpointing's recompute of a tiled MLP, whose backward recomputes the
// MLP tile by tile) it stops after norm2 and leaves `out` alone.
template <typename T>
Status BlockForward(Stream& s, const Dims& d, const LayerOffsets& o, const T* w, const T* x, T* out,
                    const BlockActs& a, bool mlp = true);

// The block's gradient ops in the order BlockBackward writes them: (weight,
// bias) unit offsets, bias -1 where absent.
std::vector<std::pair<int64_t, int64_t>> BlockGradOrder(const Dims& d, const LayerOffsets& o);
// How many of BlockGradOrder's first ops are the MLP's (down, then gate and
// up or fc). With a tiled MLP (Dims::mlp_rows > 0) every tile adds to all
// of them, so they must be one op, beginning at MlpGradBegin, in one piece.
size_t BlockMlpGradOps(const Dims& d);
int64_t MlpGradBegin(const Dims& d, const LayerOffsets& o);

// dres (N, C): d(out) on entry, d(x) on return. `g` hands out the unit's
// fp32 gradient pieces ("+=") in BlockGradOrder; BlockBackward finishes it.
template <typename T>
Status BlockBackward(Stream& s, const Dims& d, const LayerOffsets& o, const T* w,
                     GradPieceWriter& g, const T* x, T* dres, const BlockActs& a,
                     const BlockScratch& sc);

// y (n, out) = x (n, in) op(W) [+ b], with beta * y added (0 or 1). conv1d:
// W stored (in, out) (y = x W); else nn.Linear (out, in) (y = x W^T).
template <typename T>
Status LinearForward(Stream& s, T* y, const T* x, const T* w, const T* b, int64_t n, int64_t in,
                     int64_t out, bool conv1d, float beta);
// dW += (fp32), db += (fp32, may be null), dx = or += (dx_beta 0 or 1; dx may be null).
template <typename T>
Status LinearBackward(Stream& s, T* dx, float dx_beta, float* dw, float* db, const T* dy,
                      const T* x, const T* w, int64_t n, int64_t in, int64_t out, bool conv1d);

// Norm forward/backward by Dims::layernorm (mean unused for RMSNorm; bias may be null).
template <typename T>
Status NormForward(Stream& s, const Dims& d, T* out, float* mean, float* rstd, const T* inp,
                   const T* weight, const T* bias);
// dinp += (N, C); dweight, dbias += (fp32; dbias null for RMSNorm).
template <typename T>
Status NormBackward(Stream& s, const Dims& d, T* dinp, float* dweight, float* dbias, const T* dout,
                    const T* inp, const T* weight, const float* mean, const float* rstd);

}  // namespace tierflow::model_internal

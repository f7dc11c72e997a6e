// The peer AdamW: one kernel text (adam_peer_kernel.inc) compiled for AVX2
// and for AVX-512, each in its own namespace with internal linkage, run over
// static per-thread slices. Built with -O3 and without the optimizer
// library's -ffp-contract=off (src/bench/CMakeLists.txt), as a peer library
// is; the vector body fuses with explicit FMA intrinsics either way.
#include "bench/adam_peer.h"

#include <immintrin.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/half.h"
#include "common/vec_x86.h"

namespace tierflow {
namespace {

// A slice starts on a multiple of this many elements: 8 AVX-512 vectors.
constexpr size_t kSliceAlignElems = 128;

struct PeerConstants {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias2_sqrt;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float step_size;  // -lr / (1 - beta1^t)
  float decay;      // AdamW: -lr * weight_decay; Adam (L2): weight_decay
  bool decoupled_decay, l2_decay;
};

struct PeerStreams {
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grads;
  void* out;
};

using SliceFn = void (*)(const PeerConstants& c, const PeerStreams& s, size_t begin, size_t end);

// Each level's functions carry TF_PEER_TARGET, its instruction set as a
// target attribute (GCC and clang), so that the translation unit's own flags
// stay the build's: the level is chosen at run time.

// ---- AVX2 with FMA and F16C, and AVX-512: the operations of common/vec_x86.h.
#define TF_PEER_TARGET TF_VEC_AVX2_TARGET
namespace avx2 {
using namespace vec_avx2;  // NOLINT(google-build-using-namespace): the kernel text's vocabulary
#include "bench/adam_peer_kernel.inc"
}  // namespace avx2
#undef TF_PEER_TARGET

// GCC 12 flags the self-initialised _mm512_undefined_*() inside its AVX-512
// intrinsics as uninitialised once inlined: a false positive in its own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TF_PEER_TARGET TF_VEC_AVX512_TARGET
namespace avx512 {
using namespace vec_avx512;  // NOLINT(google-build-using-namespace)
#include "bench/adam_peer_kernel.inc"
}  // namespace avx512
#undef TF_PEER_TARGET
#pragma GCC diagnostic pop

// Where slice t of `threads` starts (slice `threads` "starts" at n).
size_t SliceBegin(size_t n, size_t t, size_t threads) {
  if (t >= threads) return n;
  const size_t exact = n / threads * t + n % threads * t / threads;  // floor(n * t / threads)
  return exact / kSliceAlignElems * kSliceAlignElems;
}

PeerConstants Constants(const AdamOptions& o, int64_t step) {
  const double t = static_cast<double>(step);
  const double bc1 = o.bias_correction ? 1.0 - std::pow(static_cast<double>(o.beta1), t) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(static_cast<double>(o.beta2), t) : 1.0;
  PeerConstants c;
  c.beta1 = o.beta1;
  c.one_minus_beta1 = 1.0f - o.beta1;
  c.beta2 = o.beta2;
  c.one_minus_beta2 = 1.0f - o.beta2;
  c.bias2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = o.eps;
  c.step_size = static_cast<float>(-static_cast<double>(o.lr) / bc1);
  c.decoupled_decay = o.decoupled && o.weight_decay > 0;
  c.l2_decay = !o.decoupled && o.weight_decay > 0;
  c.decay = o.decoupled ? -o.lr * o.weight_decay : o.weight_decay;
  return c;
}

}  // namespace

StatusOr<Isa> AdamPeerIsa() {
  if (CpuSupportsIsa(Isa::kAvx512)) return Isa::kAvx512;
  if (CpuSupportsIsa(Isa::kAvx2)) return Isa::kAvx2;
  return UnavailableError(
      "the peer AdamW needs AVX2 with FMA or AVX-512, and this CPU has neither");
}

Status AdamPeerStep(const AdamOptions& options, const AdamStepArgs& args, const OptimSpans& spans,
                    Isa isa) {
  TF_RETURN_IF_ERROR(ValidateAdamOptions(options));
  if (args.step < 1) {
    return InvalidArgumentError("AdamPeerStep: step must be >= 1, got " +
                                std::to_string(args.step));
  }
  if (args.grad_scale != 1.0f) {
    return InvalidArgumentError(
        "AdamPeerStep: grad_scale must be 1 (the peer, like DeepSpeed's cpu_adam, takes "
        "unscaled gradients)");
  }
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, true, true, "AdamPeerStep"));
  if (spans.backup_params != nullptr) {
    return InvalidArgumentError("AdamPeerStep: the peer takes no backup; clear the backup spans");
  }
  if (isa == Isa::kBaseline || !CpuSupportsIsa(isa)) {
    return InvalidArgumentError(
        "AdamPeerStep: level " + std::string(IsaName(isa)) +
        (isa == Isa::kBaseline ? " has no peer form" : " is not supported by this CPU") +
        "; use AdamPeerIsa()");
  }
  const size_t n = spans.n;
  if (n == 0) return Status::Ok();
  const bool has_out = spans.out != nullptr;
  const SliceFn slice = isa == Isa::kAvx512
                            ? avx512::Select(spans.grad_dtype, has_out, spans.out_dtype)
                            : avx2::Select(spans.grad_dtype, has_out, spans.out_dtype);
  if (slice == nullptr) return InternalError("AdamPeerStep: no kernel for this layout");
  const PeerConstants c = Constants(options, args.step);
  const PeerStreams s{spans.params, spans.exp_avg, spans.exp_avg_sq, spans.grads, spans.out};
  const size_t threads = static_cast<size_t>(tbb::this_task_arena::max_concurrency());
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, threads, 1),
      [&](const tbb::blocked_range<size_t>& slices) {
        for (size_t t = slices.begin(); t < slices.end(); ++t) {
          slice(c, s, SliceBegin(n, t, threads), SliceBegin(n, t + 1, threads));
        }
      },
      tbb::static_partitioner());
  return Status::Ok();
}

}  // namespace tierflow

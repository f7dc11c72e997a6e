// The memory-bandwidth limit of an optimizer step, measured: kernels that
// move exactly the bytes an optimizer step over the same spans moves (the
// same streams, dtypes and in-place updates) with almost no arithmetic. The
// step's time divided by the best probe's time is how close the step runs to
// this machine's memory bandwidth.
//
// The probe is an upper bound, so it shares no code with the optimizer
// kernels (a slow shared skeleton would slow both and hide the gap), runs at
// the widest instruction set this CPU has, whatever level the step uses, and
// comes in more than one shape: the limit is the fastest shape measured in
// the same run.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/cpu_isa.h"
#include "optim/optim_spans.h"
#include "tierflow/status.h"

namespace tierflow {

enum class ProbeShape : uint8_t {
  // The optimizer skeleton's shape as of issue 22, re-implemented here:
  // 16 Ki-element chunks as oneTBB tasks (simple partitioner), walked in
  // 64-element blocks, each after a prefetch of the block 512 elements ahead.
  kBlocked = 0,
  // Each thread of the calling arena one contiguous 1/T-th of the span (a
  // static partition), walked in one pass of the same prefetched blocks, the
  // copy out (a write-only stream) written with non-temporal stores, which
  // skip the read for ownership that plain stores make: an upper bound for a
  // step that prefetches and streams its copy out too, as the optimizer
  // kernels do (optim/step_loop.h).
  kStaticSlices = 1,
  // 16 Ki-element chunks as oneTBB tasks, each in one pass in which every
  // vector's streams are loaded, added to and stored before the next
  // vector's (the order a fused update runs in), 4 vectors at a time after a
  // prefetch 512 elements ahead, the copy out streamed. Added when the
  // optimizer kernels, so shaped, outran both shapes above by up to 10%:
  // the limit must stay an upper bound.
  kInterleaved = 2,
};
inline constexpr ProbeShape kProbeShapes[] = {ProbeShape::kBlocked, ProbeShape::kStaticSlices,
                                              ProbeShape::kInterleaved};

// "blocked", "static", "interleaved".
std::string_view ProbeShapeName(ProbeShape shape);

// The level the probe should run at on this CPU: the widest of baseline,
// AVX2 (with FMA and F16C) and AVX-512 that CpuSupportsIsa reports.
Isa StreamProbeIsa();

// Per element: a = grad * addend (widened like the step's gradients); each
// non-null fp32 array among params, exp_avg, exp_avg_sq gets x += a (read and
// written in place); out (when set) gets params narrowed to out_dtype
// (rounded to nearest even, NaN kept a NaN). With a finite gradient and
// addend 0 the values are unchanged, so it may run on an optimizer's live
// buffers. Traffic per element: TrafficBytesPerParam(spans), in either shape.
// Runs the vector code of level `isa` (StreamProbeIsa() for the limit; the
// others are there to be tested).
// Errors: InvalidArgument for a null params or grads with n > 0, an unknown
// shape, or a level this CPU lacks.
// Thread safety: re-entrant; runs on oneTBB in the calling thread's arena.
Status StreamProbe(const OptimSpans& spans, float addend, ProbeShape shape, Isa isa);

}  // namespace tierflow

// The flat spans one CPU optimizer step reads and writes, what a step reports,
// and the memory traffic that layout implies.
//
// An optimizer step (AdamStep, LionStep, SgdStep) updates one contiguous
// sub-group of parameters: fp32 master weights and fp32 state arrays updated
// in place, gradients read in fp32/bf16/fp16, and optionally the updated
// weights written in a 16-bit (or fp32) copy that goes back to the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// The fixed unit of work of every kernel here: spans are cut into chunks of
// this many elements, counted from the span's start, one oneTBB task each
// (16 Ki elements = 64 KiB per fp32 stream). Fixed, never derived from the
// thread count, so results do not depend on it.
inline constexpr size_t kOptimChunkElems = size_t{1} << 14;

// Pointers are borrowed for the duration of one call; the caller owns them.
// REQUIRES: the arrays do not overlap one another, and each is aligned to its
// element size (4 or 2 bytes); no further alignment is needed.
struct OptimSpans {
  float* params = nullptr;      // (n,) fp32 master weights, updated in place
  float* exp_avg = nullptr;     // (n,) Adam/Lion first moment, SGD momentum buffer
  float* exp_avg_sq = nullptr;  // (n,) Adam second moment; unused (may be null) otherwise
  const void* grads = nullptr;  // (n,) gradients in grad_dtype, read only
  DType grad_dtype = DType::kF32;
  void* out = nullptr;  // (n,) optional copy of the updated weights in out_dtype; null: none
  DType out_dtype = DType::kBF16;
  size_t n = 0;  // number of parameters; 0 is a valid no-op
  // Optional: the state as it was before this step, for a caller that may
  // have to undo it (the engine's speculative updates). When backup_params is
  // set, the old params and the old values of each state array the optimizer
  // updates are copied to the backup of the same name (n elements each) in
  // the step's own pass, with non-temporal stores: 12 bytes per parameter of
  // writes for Adam, where a separate copy costs 24 bytes of traffic more.
  // Each backup is then required exactly for the arrays the optimizer
  // updates, must be 64-byte aligned, and must overlap no other array.
  float* backup_params = nullptr;
  float* backup_exp_avg = nullptr;
  float* backup_exp_avg_sq = nullptr;
};

// What one step saw.
struct StepResult {
  // True when some scaled gradient (grad * grad_scale) was Inf or NaN. The
  // step has then already been applied: the affected elements of params and
  // state are non-finite. A caller that must skip the step without touching
  // state (fp16 loss scaling) checks the gradients with GradStats first.
  bool has_non_finite_grads = false;
};

// Checks pointers and dtypes for an optimizer that needs the given state arrays.
// Errors are InvalidArgument and name `optimizer` and the missing span. The
// backups (if any) are checked against the same needs.
Status ValidateOptimSpans(const OptimSpans& spans, bool needs_exp_avg, bool needs_exp_avg_sq,
                          std::string_view optimizer);

// Bytes of DRAM traffic per parameter for this layout, counted honestly:
// 8 for each fp32 array updated in place (params, exp_avg, exp_avg_sq when
// non-null: read 4 + write 4), the gradient dtype size (read), and the out
// dtype size when `out` is set (write), and 4 for each backup array (write).
// Adam fp32: 3*8 + 4 = 28; + bf16 out: 30; + backup: 42.
size_t TrafficBytesPerParam(const OptimSpans& spans);

}  // namespace tierflow

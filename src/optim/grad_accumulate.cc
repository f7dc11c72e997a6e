// fp32 gradient accumulation on the host: the loop is grad_kernels.cc,
// compiled once per instruction-set level (see optim/optim_kernels.h).
#include "optim/grad_accumulate.h"

#include "optim/chunk_loop.h"

namespace tierflow {

void AccumulateGrads(float* acc, const void* grads, DType grad_dtype, size_t n, bool first) {
  const Isa isa = SelectedIsaOrExit();
  (void)AccumulateGrads(acc, grads, grad_dtype, n, first, isa);  // the level is supported
}

Status AccumulateGrads(float* acc, const void* grads, DType grad_dtype, size_t n, bool first,
                       Isa isa) {
  TF_RETURN_IF_ERROR(CheckIsaSupported(isa, "AccumulateGrads"));
  const optim_internal::AccumulateFn kernel =
      optim_internal::GradKernelsFor(isa).accumulate[static_cast<int>(grad_dtype)];
  optim_internal::ParallelForChunks(n, [&](size_t begin, size_t end) {
    kernel(acc, grads, begin, end, first);
    return false;
  });
  return Status::Ok();
}

}  // namespace tierflow

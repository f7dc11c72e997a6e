// The kernel tables of each instruction-set level.
#include "optim/chunk_loop.h"

namespace tierflow::optim_internal {

const AdamKernels& AdamKernelsFor(Isa isa) {
  return TableForIsa(isa, isa_baseline::kAdamKernels, isa_avx2::kAdamKernels,
                     isa_avx512::kAdamKernels);
}

const LionKernels& LionKernelsFor(Isa isa) {
  return TableForIsa(isa, isa_baseline::kLionKernels, isa_avx2::kLionKernels,
                     isa_avx512::kLionKernels);
}

const SgdKernels& SgdKernelsFor(Isa isa) {
  return TableForIsa(isa, isa_baseline::kSgdKernels, isa_avx2::kSgdKernels,
                     isa_avx512::kSgdKernels);
}

const GradKernels& GradKernelsFor(Isa isa) {
  return TableForIsa(isa, isa_baseline::kGradKernels, isa_avx2::kGradKernels,
                     isa_avx512::kGradKernels);
}

}  // namespace tierflow::optim_internal

// The kernel tables of each instruction-set level.
#include "optim/chunk_loop.h"

namespace tierflow::optim_internal {

const AdamKernels& AdamKernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return isa_avx512::kAdamKernels;
    case Isa::kAvx2:
      return isa_avx2::kAdamKernels;
    case Isa::kBaseline:
      break;
  }
  return isa_baseline::kAdamKernels;
}

const LionKernels& LionKernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return isa_avx512::kLionKernels;
    case Isa::kAvx2:
      return isa_avx2::kLionKernels;
    case Isa::kBaseline:
      break;
  }
  return isa_baseline::kLionKernels;
}

const SgdKernels& SgdKernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return isa_avx512::kSgdKernels;
    case Isa::kAvx2:
      return isa_avx2::kSgdKernels;
    case Isa::kBaseline:
      break;
  }
  return isa_baseline::kSgdKernels;
}

const GradKernels& GradKernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return isa_avx512::kGradKernels;
    case Isa::kAvx2:
      return isa_avx2::kGradKernels;
    case Isa::kBaseline:
      break;
  }
  return isa_baseline::kGradKernels;
}

}  // namespace tierflow::optim_internal

// The kernel tables of each instruction-set level.
#include "optim/chunk_loop.h"

namespace tierflow::optim_internal {

const AdamKernels& AdamKernelsFor(Isa isa) { return TF_ISA_TABLE(isa, kAdamKernels); }

const LionKernels& LionKernelsFor(Isa isa) { return TF_ISA_TABLE(isa, kLionKernels); }

const SgdKernels& SgdKernelsFor(Isa isa) { return TF_ISA_TABLE(isa, kSgdKernels); }

const GradKernels& GradKernelsFor(Isa isa) { return TF_ISA_TABLE(isa, kGradKernels); }

}  // namespace tierflow::optim_internal

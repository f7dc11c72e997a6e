// Plain scalar double-precision references for the CPU optimizers: the
// formulas of optim/adam.h, optim/lion.h and optim/sgd.h written one element
// at a time, with every option, constant and state in double. The fast
// kernels are tested against these (tests/optim). Not for production use.
//
// State is double so that several steps in a row stay a reference; the
// gradients are read from their storage dtype exactly (widening is exact).
// Options are taken as given (the fast entry points validate them).
#pragma once

#include <cstddef>

#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/sgd.h"
#include "tierflow/dtype.h"

namespace tierflow {

// REQUIRES: all arrays hold n elements.
void AdamReferenceStep(const AdamOptions& options, const AdamStepArgs& args, const void* grads,
                       DType grad_dtype, size_t n, double* params, double* exp_avg,
                       double* exp_avg_sq);

void LionReferenceStep(const LionOptions& options, const LionStepArgs& args, const void* grads,
                       DType grad_dtype, size_t n, double* params, double* exp_avg);

// momentum_buffer may be null when options.momentum == 0.
void SgdReferenceStep(const SgdOptions& options, const SgdStepArgs& args, const void* grads,
                      DType grad_dtype, size_t n, double* params, double* momentum_buffer);

// The gradient at index i widened to double.
double ReferenceGrad(const void* grads, DType grad_dtype, size_t i);

}  // namespace tierflow

// The reduction every host collective uses: contributions widened to fp32 and
// added one at a time in rank order, out = ((c_0 + c_1) + c_2) + ..., element
// by element. That is exactly what one process does when it accumulates the
// same gradients micro-batch after micro-batch, so N ranks and one rank with
// N accumulation steps give the same bits. (MPI's own MPI_SUM may reorder,
// or add pairwise, and NCCL fixes no order at all.)
#pragma once

#include <cstddef>

#include "tierflow/dtype.h"

namespace tierflow::comm {

// out[i] = float(src[i]) for i < n (src holds elements of `dtype`).
void WidenInto(float* out, const void* src, DType dtype, size_t n);

// out[i] = out[i] + float(src[i]) for i < n, one IEEE fp32 add each.
void AddWidened(float* out, const void* src, DType dtype, size_t n);

}  // namespace tierflow::comm

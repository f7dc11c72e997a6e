// The bulk dtype conversions of ConvertBuffer (common/half.h), compiled once
// per instruction-set level (convert_kernels.cc, see common/cpu_isa.h): one
// function per (from, to) pair, indexed by static_cast<int>(DType).
//
// Internal header: plain declarations only, so the per-level objects can
// include it without pulling in any inline function.
#pragma once

#include <cstddef>

#include "common/isa_tables.h"

namespace tierflow::convert_internal {

// Converts n elements of src (dtype `from`) to dst (dtype `to`). Element i
// becomes FromFloat<To>(ToFloat(src[i])) exactly, at every level.
using ConvertFn = void (*)(const void* src, void* dst, size_t n);

struct ConvertKernels {
  ConvertFn convert[3][3];  // [from][to]
};

}  // namespace tierflow::convert_internal

TF_DECLARE_ISA_TABLES(convert_internal::ConvertKernels, kConvertKernels)

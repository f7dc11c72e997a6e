// Element types tierflow stores and moves: fp32 and the two 16-bit formats.
//
// bf16 and fp16 are plain 16-bit storage types here (no arithmetic): kernels
// convert to fp32, compute, and convert back with round-to-nearest-even (see
// src/common/half.h). Keeping them POD lets tensors live in flat buffers that
// move between tiers as bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

struct bf16 {
  uint16_t bits;
};
struct fp16 {
  uint16_t bits;
};

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

// "f32", "bf16", "f16": the names used on the command line and in files.
std::string_view DTypeName(DType t);

// Accepts "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16".
StatusOr<DType> ParseDType(std::string_view name);

}  // namespace tierflow

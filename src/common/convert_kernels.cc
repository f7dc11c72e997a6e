// ConvertBuffer's loops for one instruction-set level: compiled once per
// level with TIERFLOW_ISA_NS naming its namespace (tierflow_isa_objects in
// CMakeLists.txt). Whole vectors, stored in pairs (StorePair: AVX2 narrows a
// pair to bf16 16 lanes at a time), then the last few elements through the
// same vector code on zero-filled lanes, so every element rounds the same way.
#include "common/convert_kernels.h"

#include "common/simd.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

template <Elem From, Elem To>
void Convert(const void* src_bytes, void* dst_bytes, size_t n) {
  const Storage<From>* src = static_cast<const Storage<From>*>(src_bytes);
  Storage<To>* dst = static_cast<Storage<To>*>(dst_bytes);
  size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
#pragma GCC unroll 4
    for (size_t u = 0; u < 4; u += 2) {
      StorePair<To, false>(dst + i + u * kLanes, Load<From>(src + i + u * kLanes),
                           Load<From>(src + i + (u + 1) * kLanes));
    }
  }
  for (; i + kLanes <= n; i += kLanes) Store<To>(dst + i, Load<From>(src + i));
  if (i < n) {
    PartialLanes<Storage<From>> in;
    PartialLanes<Storage<To>> out;
    in.Fill(src + i, n - i);
    Store<To>(out.v, Load<From>(in.v));
    out.CopyOut(dst + i, n - i);
  }
}

// fp32 to fp32 is the identity: a copy.
template <>
void Convert<Elem::kF32, Elem::kF32>(const void* src_bytes, void* dst_bytes, size_t n) {
  __builtin_memcpy(dst_bytes, src_bytes, n * sizeof(float));
}

}  // namespace

const convert_internal::ConvertKernels kConvertKernels = {{
    {&Convert<Elem::kF32, Elem::kF32>, &Convert<Elem::kF32, Elem::kBF16>,
     &Convert<Elem::kF32, Elem::kF16>},
    {&Convert<Elem::kBF16, Elem::kF32>, &Convert<Elem::kBF16, Elem::kBF16>,
     &Convert<Elem::kBF16, Elem::kF16>},
    {&Convert<Elem::kF16, Elem::kF32>, &Convert<Elem::kF16, Elem::kBF16>,
     &Convert<Elem::kF16, Elem::kF16>},
}};

}  // namespace tierflow::TIERFLOW_ISA_NS

// How much normalizers and pre-tokenizers may lengthen the text they rewrite.
//
// A tokenizer.json can chain rewrites that each multiply the text: 30 Replace
// "a" -> "aa" steps turn each "a" into 2^30 bytes, and a 1000-character
// Metaspace replacement turns each space into 3000 bytes. So the text out of
// a normalizer, and the pieces out of a pre-tokenizer together, may hold at
// most kMaxTextGrowth times the bytes that went in plus kTextGrowthFloorBytes;
// each step checks before it builds the longer text, and a step that would
// pass the bound fails with an error naming it. The released tokenizers stay
// far below: Metaspace's "▁" makes a space 3 bytes, ByteLevel a byte at most
// 2, and NFKC, the largest Unicode expansion, a character at most 11 times its
// bytes (U+FDFA).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

inline constexpr size_t kMaxTextGrowth = 16;
inline constexpr size_t kTextGrowthFloorBytes = size_t{64} << 10;

struct GrowthLimit {
  size_t input_bytes = 0;  // what went into the normalizer or pre-tokenizer
  size_t max_bytes = 0;    // kMaxTextGrowth * input_bytes + kTextGrowthFloorBytes

  static GrowthLimit For(size_t input_bytes);
  // InvalidArgument: "WHERE: WHAT would make the text longer than ...", with
  // the bound and what to do.
  Status Error(const std::string& where, std::string_view what) const;
};

}  // namespace tierflow

// The growth bound of text_growth.h.
#include "data/text_growth.h"

#include <limits>

namespace tierflow {

GrowthLimit GrowthLimit::For(size_t input_bytes) {
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  GrowthLimit limit;
  limit.input_bytes = input_bytes;
  limit.max_bytes = input_bytes > (kMax - kTextGrowthFloorBytes) / kMaxTextGrowth
                        ? kMax
                        : kMaxTextGrowth * input_bytes + kTextGrowthFloorBytes;
  return limit;
}

Status GrowthLimit::Error(const std::string& where, std::string_view what) const {
  return InvalidArgumentError(
      where + ": " + std::string(what) + " would make the text longer than " +
      std::to_string(max_bytes) + " bytes: a normalizer or pre-tokenizer may grow its " +
      std::to_string(input_bytes) + "-byte input at most " + std::to_string(kMaxTextGrowth) +
      " times, plus " + std::to_string(kTextGrowthFloorBytes) +
      " bytes (the released tokenizers grow it at most 3 times). Shorten the replacement, or "
      "remove the steps that lengthen what earlier steps already lengthened");
}

}  // namespace tierflow

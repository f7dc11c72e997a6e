// GPT-2's pre-tokenization: the split of text into pieces that BPE then
// encodes one at a time, written by hand because std::regex has no \p{L}.
//
// It reproduces the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched repeatedly from the left, including its backtracking corner: a run
// of whitespace followed by a non-space gives up its last whitespace character
// so it can lead the next word (" ?\p{L}+" takes only U+0020 as the lead, so
// "\n\nHello" splits as "\n\n", "Hello" but "   Hello" as "  ", " Hello").
// Character classes come from unicode_class.h (Unicode 14.0).
#pragma once

#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

// Splits `text` into pieces that concatenate back to `text` exactly. Each
// piece views `text`. Errors: InvalidArgument naming the byte offset (plus
// `base_offset_bytes`, for text cut from a larger one) of the first byte that
// is not well-formed UTF-8.
StatusOr<std::vector<std::string_view>> SplitGpt2Pieces(std::string_view text,
                                                        size_t base_offset_bytes = 0);

}  // namespace tierflow

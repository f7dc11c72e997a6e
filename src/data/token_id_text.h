// Token ids written as text, for `tierflow tokenize --decode`: a JSON array
// ([1, 2, 3]) or integers separated by white space and/or commas.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

// Errors: InvalidArgument naming the first item that is not an integer in
// [0, vocab_size) and its position (1-based), or a malformed JSON array.
StatusOr<std::vector<int32_t>> ParseTokenIdText(std::string_view text, int32_t vocab_size);

}  // namespace tierflow

// Byte sizes and counts as people write them: "2GiB", "512MB", "64M", "1e6".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

// Parses a byte size: a number with an optional suffix K/M/G/T (powers of
// 1024, with or without "iB"/"B") or KB/MB/GB/TB (powers of 1000). "4096" is
// bytes. Errors name the text and show the accepted forms.
StatusOr<uint64_t> ParseByteSize(std::string_view text);

// Parses a count: "1000", "64M" (= 64*2^20), "1e9", "7B" (= 7*10^9 when
// followed by B as in model sizes is NOT accepted; use "7e9").
StatusOr<uint64_t> ParseCount(std::string_view text);

// "1.50 GiB", "512.0 MiB", "12 B".
std::string FormatBytes(uint64_t num_bytes);

}  // namespace tierflow

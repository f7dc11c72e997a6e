// Byte sizes and counts as people write them: "2GiB", "512MB", "64M", "1e6".
//
// The two read K/M/G/T differently, each as its readers expect: a byte size
// "4G" is 4 GiB (memory is sized in powers of two), a count "7B" or "64M" is
// 7*10^9 or 64*10^6 (parameters and tokens are counted in powers of ten, as
// in "a 7B model"). Write "Ki"/"Mi"/"Gi"/"Ti" for binary multiples of
// either.
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

// Parses a count (parameters, tokens): a number, optionally in exponent form
// ("1e9", "1.5e6"), with an optional case-insensitive suffix: K = 10^3,
// M = 10^6, B or G = 10^9, T = 10^12 (decimal: "7B" = 7*10^9, "64M" =
// 64*10^6), or Ki/Mi/Gi/Ti = 2^10..2^40 ("4Mi" = 4194304). No space before
// the suffix. Rounded to the nearest integer. Errors: InvalidArgument naming
// the text and showing the accepted forms.
StatusOr<uint64_t> ParseCount(std::string_view text);

// ParseCount's suffixes, for the --help text of every flag it reads.
inline constexpr char kCountSuffixHelp[] =
    "K/M/B/T = 10^3/10^6/10^9/10^12, Ki/Mi/Gi = 2^10/2^20/2^30";

// "1.50 GiB", "512.0 MiB", "12 B".
std::string FormatBytes(uint64_t num_bytes);

}  // namespace tierflow

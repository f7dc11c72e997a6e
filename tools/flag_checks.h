// Range checks for the command line's numeric flags, one mechanism for every
// subcommand: each numeric option carries one of these CLI11 validators, so
// NaN, infinities and values that mean nothing (a count of -4, 0 TFLOP/s)
// are refused with an error naming the flag, never taken as "not given" and
// replaced by a default.
//
// Every validator here is named kRangeCheck; UncheckedNumericFlags lists the
// numeric options (CLI11 type INT, UINT or FLOAT) that carry none, and
// tools/main.cc refuses to run while that list is not empty, so a new flag
// cannot be added without saying which values it takes. Text flags that hold
// a size or a count (parsed later by common/units.h) take ByteSizeAtLeast /
// CountAtLeast, which parse them the same way.
//
// The values are checked as CLI11 reads them, before any command runs; the
// error reads "--cores: -4 is out of range; give a number of at least 1", and
// the command exits with status 2 (tools/main.cc: a refused command line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tierflow::cli {

inline constexpr char kRangeCheck[] = "tierflow-range";

// A finite number of at least `min` (and at most `max`). Integral flags are
// also checked by CLI11's conversion (2.5 for an INT is refused there).
CLI::Validator AtLeast(double min);
CLI::Validator InRange(double min, double max);
// A finite number > 0: rates, sizes, counts where 0 means nothing.
CLI::Validator Positive();
// Any value of the option's type is meaningful (a seed): says so, so the
// audit below knows the flag was considered.
CLI::Validator AnyValue();

// A text flag read by ParseByteSize / ParseCount (common/units.h): the text
// must parse, and be at least `min`. `keyword` (e.g. "auto"), when given, is
// accepted as is.
CLI::Validator ByteSizeAtLeast(uint64_t min);
CLI::Validator CountAtLeast(uint64_t min, const std::string& keyword = "");

// The options of `app` and its subcommands, recursively, whose type is
// numeric and that carry no kRangeCheck validator, as "SUBCOMMAND --flag".
std::vector<std::string> UncheckedNumericFlags(const CLI::App& app);

}  // namespace tierflow::cli

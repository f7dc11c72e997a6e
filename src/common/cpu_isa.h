// The instruction-set levels the host hot loops are compiled for, what this
// CPU runs, and the one level the process uses.
//
// The optimizer kernels, gradient accumulation and norms, and bulk dtype
// conversion are compiled once per level (each in its own namespace, see
// src/optim/optim_kernels.h and src/common/convert_kernels.h) and chosen at
// run time, so one binary built for the x86-64 baseline runs the AVX2 or
// AVX-512 loops where the CPU has them. Every level gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

// Ascending: a CPU that runs a level runs every level below it.
//   kBaseline: x86-64 (SSE2), every x86-64 CPU.
//   kAvx2:     x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE (Haswell, Zen 1 and later).
//   kAvx512:   x86-64-v4: AVX-512 F, BW, CD, DQ, VL (Skylake-SP, Zen 4 and later).
enum class Isa : uint8_t { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// "baseline", "avx2", "avx512": the names TIERFLOW_ISA and reports use.
std::string_view IsaName(Isa isa);

// Parses a level name. Errors: InvalidArgument naming the text and the choices.
StatusOr<Isa> ParseIsa(std::string_view name);

// Whether this CPU and OS run `isa`: every feature the level's compiler flags
// allow (cpuid), and the OS saving the vector registers it uses (XCR0).
bool CpuSupportsIsa(Isa isa);

// Every level this CPU runs, ascending (always starts with kBaseline).
std::vector<Isa> SupportedIsas();

// The level the process uses, chosen once (thread-safe) by ChooseIsa from the
// environment variable TIERFLOW_ISA and SupportedIsas(). tools/main.cc calls
// it once the command line is parsed and exits with its error, so a bad
// TIERFLOW_ISA stops a command before anything runs (--help and --version
// still answer).
StatusOr<Isa> SelectedIsa();

// The choice SelectedIsa makes, as a pure function. `forced` is the value of
// TIERFLOW_ISA (null or empty: unset). Unset: the highest of `supported`.
// Set: that level. Errors: InvalidArgument for an unknown name, or a level
// not in `supported`; the message names the value, the choices and what this
// CPU supports.
StatusOr<Isa> ChooseIsa(const char* forced, const std::vector<Isa>& supported);

// SelectedIsa() for the entry points that return no Status (ConvertBuffer,
// AccumulateGrads): when the selection failed, prints its error and ends the
// process with exit status 2. tools/main.cc reports that error first.
Isa SelectedIsaOrExit();

// Ok when this CPU runs `isa`; otherwise FailedPrecondition naming `what`,
// the level and the levels this CPU supports. Entry points that take an
// explicit Isa check it before running anything.
Status CheckIsaSupported(Isa isa, std::string_view what);

// The level an entry point that takes an optional Isa runs: `requested`, or
// SelectedIsa() without one (its error when the choice failed), checked by
// CheckIsaSupported(`what`).
StatusOr<Isa> IsaToRun(std::optional<Isa> requested, std::string_view what);

// The table of `isa` among the three levels' tables of a hot loop
// (common/isa_tables.h), given in ascending order; the baseline's for a value
// that is no level.
template <typename Table>
const Table& TableForIsa(Isa isa, const Table& baseline, const Table& avx2, const Table& avx512) {
  const Table* const by_level[] = {&baseline, &avx2, &avx512};  // Isa's values, ascending
  const size_t level = static_cast<size_t>(isa);
  return level < std::size(by_level) ? *by_level[level] : baseline;
}

}  // namespace tierflow

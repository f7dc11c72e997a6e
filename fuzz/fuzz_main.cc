// The libFuzzer entry: every fuzz executable is this file compiled with
// TIERFLOW_FUZZ_ENTRY set to one of the functions in entry_points.h.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/entry_points.h"

#ifndef TIERFLOW_FUZZ_ENTRY
#error "compile with -DTIERFLOW_FUZZ_ENTRY=<an entry point of fuzz/entry_points.h>"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tierflow::fuzz::TIERFLOW_FUZZ_ENTRY(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

// FUZZ_CHECK: the invariant check of the fuzz entry points.
//
// An entry point must not only survive its input: when a parser accepts an
// input, what it returns must satisfy the parser's documented contract (byte
// ranges tile the file, a decoded header re-encodes to the same value, ...).
// A broken contract is as much a bug as a crash, so it aborts the process,
// which libFuzzer reports as a crash and saves the input; the regression test
// runs the same entry points, so there too it fails loudly.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

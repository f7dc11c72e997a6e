// A copy of optimizer-state-sized buffers on all of oneTBB's threads: one
// core's memcpy reaches about half of the DRAM bandwidth two cores do, and
// the speculation backups and rollbacks (engine) copy tens of MB at a time
// while the optimizer waits.
#pragma once

#include <cstddef>

namespace tierflow {

// Copies `num_bytes` from `src` to `dst` in 1 MiB pieces in parallel, in the
// calling thread's oneTBB arena. REQUIRES: the ranges do not overlap.
void ParallelCopy(void* dst, const void* src, size_t num_bytes);

}  // namespace tierflow

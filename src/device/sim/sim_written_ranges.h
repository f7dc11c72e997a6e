// Which bytes of the simulated accelerator's memory may be non-zero.
//
// On the sim device kernels never run, so device memory changes only through
// host-to-device and device-to-device copies and memsets. Memory starts as
// zero pages (mmap), so a memset to zero of bytes that nothing has written
// since they were last zeroed changes nothing; CpuStream skips writing those
// bytes (the memset still takes its modelled time). Without this, zeroing
// the engine's fp32 gradient buckets before every unit's backward wrote
// 4 B/param per micro-batch on the host's cores and DRAM: work a GPU does
// not take from the CPU, which inflated the sim's pipelined step.
//
// Device-to-device copies likewise move only the source's written parts
// (zeroing what was written in the destination first): the transformer's
// residual copies read memory no kernel wrote, and copying 25 MB of zeros
// per copy on the host cost the 0.5 B model's sim step several times its
// modelled compute.
//
// Decisions are made when an operation is enqueued. That is exact for any
// program whose streams are ordered by events: an operation ordered before
// another (by stream order or an event it waits on) was enqueued before it.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace tierflow {

class SimWrittenRanges {
 public:
  // [ptr, ptr + n) may now hold non-zero bytes.
  void MarkWritten(const void* ptr, size_t n);

  // The parts of [ptr, ptr + n) that may hold non-zero bytes, as
  // (address, length) pairs in address order; they count as zero from now
  // on, so the caller must zero exactly these.
  std::vector<std::pair<char*, size_t>> TakeWritten(void* ptr, size_t n);

  // The parts of [ptr, ptr + n) that may hold non-zero bytes, as TakeWritten
  // gives them, leaving the set as it is.
  std::vector<std::pair<char*, size_t>> FindWritten(const void* ptr, size_t n) const;

  // [ptr, ptr + n) was unmapped: forget it (a later mapping there is zeros).
  void Forget(const void* ptr, size_t n);

  size_t num_ranges() const;  // for tests

 private:
  // Removes [lo, hi) from ranges_, appending what was removed to `out` when given.
  void Remove(uintptr_t lo, uintptr_t hi, std::vector<std::pair<char*, size_t>>* out);

  mutable std::mutex mu_;
  std::map<uintptr_t, uintptr_t> ranges_;  // start -> end, disjoint, not adjacent
};

}  // namespace tierflow

// Large host allocations for buffers that are streamed at DRAM bandwidth:
// the optimizer state, pinned staging, emulated device memory, bench arrays.
//
// They come straight from mmap, aligned to 2 MiB and advised
// MADV_HUGEPAGE, because the kernel's default on many distributions
// (transparent_hugepage=madvise) backs plain malloc memory with 4 KiB pages.
// On the development machine's AMD EPYC that cost the AdamW step about a
// fifth of its throughput (bench adam, bf16/bf16: 1630 vs 1990 Mparams/s)
// and made the first write of a 1 GB buffer cost 0.5 s of page faults.
// The advice is a hint: where the kernel has no transparent huge pages the
// memory is ordinary pages, with the same contract.
#pragma once

#include <cstddef>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

// Below this a buffer cannot hold a huge page, and malloc serves it.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Returns `num_bytes` (> 0) of zero-filled memory aligned to 4096 bytes (to
// 2 MiB from kHugePageBytes on), or nullptr when the host has none. Free with
// FreeHostPages and the same size. Safe to call from any thread.
void* AllocateHostPages(size_t num_bytes);
void FreeHostPages(void* p, size_t num_bytes);

// Pinned host buffers (either device's AllocatePinned) start on a 4096-byte
// boundary and span whole pages: O_DIRECT reads and writes them in place.
inline constexpr size_t kPinnedHostAlignment = 4096;
inline constexpr size_t PinnedHostBytes(size_t num_bytes) {
  return (num_bytes + kPinnedHostAlignment - 1) / kPinnedHostAlignment * kPinnedHostAlignment;
}

// Backs every page of [p, p + num_bytes) (an AllocateHostPages block) with
// memory now, as page-locked memory is, so that no later write pays the
// first-touch fault. With huge pages that fault is the kernel zeroing (and
// compacting for) 2 MiB at a time: measured here at 0.5 GB/s, 100 ms for
// the first speculative update of a 4Mi-parameter sub-group into fresh
// backup memory, in the middle of a step. MADV_POPULATE_WRITE (Linux 5.14),
// or a write of zero to each page where the kernel lacks it. OutOfMemory
// names `what` when the host cannot back the block.
Status PopulateHostPages(void* p, size_t num_bytes, std::string_view what);

// Owns one AllocateHostPages block.
class HostPages {
 public:
  HostPages() = default;
  // OutOfMemory names `what` and its size when the host cannot back it.
  static StatusOr<HostPages> Allocate(size_t num_bytes, std::string_view what);
  // Allocate, then PopulateHostPages.
  static StatusOr<HostPages> AllocateResident(size_t num_bytes, std::string_view what);
  HostPages(HostPages&& other) noexcept { *this = static_cast<HostPages&&>(other); }
  HostPages& operator=(HostPages&& other) noexcept;
  HostPages(const HostPages&) = delete;
  HostPages& operator=(const HostPages&) = delete;
  ~HostPages() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t num_bytes() const { return num_bytes_; }
  // Page-locks the block (mlock: resident, never swapped; DeepSpeed's
  // pin_memory for optimizer state); unlocked when freed. Errors:
  // ResourceExhausted naming `what`, its size and RLIMIT_MEMLOCK, and how to
  // raise it, when the kernel refuses.
  Status Lock(std::string_view what);
  bool locked() const { return locked_; }

 private:
  void Reset();
  void* data_ = nullptr;
  size_t num_bytes_ = 0;
  bool locked_ = false;
};

}  // namespace tierflow

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

// Owns one AllocateHostPages block.
class HostPages {
 public:
  HostPages() = default;
  // OutOfMemory names `what` and its size when the host cannot back it.
  static StatusOr<HostPages> Allocate(size_t num_bytes, std::string_view what);
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

 private:
  void Reset();
  void* data_ = nullptr;
  size_t num_bytes_ = 0;
};

}  // namespace tierflow

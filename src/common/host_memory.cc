// mmap'd host memory, 2 MiB-aligned and advised MADV_HUGEPAGE.
#include "common/host_memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/units.h"

namespace tierflow {
namespace {

constexpr size_t kPageBytes = 4096;

size_t MappedBytes(size_t num_bytes) {
  return (num_bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

}  // namespace

void* AllocateHostPages(size_t num_bytes) {
  // Beyond any address space; also keeps the rounding below from wrapping.
  if (num_bytes == 0 || num_bytes > (SIZE_MAX >> 2)) return nullptr;
  if (num_bytes < kHugePageBytes) {
    void* p = std::aligned_alloc(kPageBytes, MappedBytes(num_bytes));
    if (p != nullptr) std::memset(p, 0, MappedBytes(num_bytes));
    return p;
  }
  // Map one huge page more than needed and trim both ends to a 2 MiB
  // boundary: older kernels do not align large anonymous mappings.
  const size_t size = MappedBytes(num_bytes);
  const size_t padded = size + kHugePageBytes;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + padded, used_end = aligned + size;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  void* p = reinterpret_cast<void*>(aligned);
  // A hint: EINVAL where the kernel has no transparent huge pages.
  (void)madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void FreeHostPages(void* p, size_t num_bytes) {
  if (p == nullptr) return;
  if (num_bytes < kHugePageBytes) {
    std::free(p);
  } else {
    munmap(p, MappedBytes(num_bytes));
  }
}

Status PopulateHostPages(void* p, size_t num_bytes, std::string_view what) {
  if (p == nullptr || num_bytes == 0) return Status::Ok();
  // Below a huge page the block came from malloc and was zero-filled (touched).
  if (num_bytes < kHugePageBytes) return Status::Ok();
  const size_t size = MappedBytes(num_bytes);
  if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return Status::Ok();
  const int err = errno;
  if (err == ENOMEM || err == EFAULT || err == EHWPOISON) {
    return OutOfMemoryError("host memory: cannot back the " + FormatBytes(num_bytes) + " of " +
                            std::string(what) + " with memory (" + std::strerror(err) +
                            "); free host memory or lower the buffer's size");
  }
  // EINVAL: a kernel before 5.14. The block is zero: writing zero changes
  // nothing but the fault.
  volatile char* bytes = static_cast<char*>(p);
  for (size_t off = 0; off < size; off += kPageBytes) bytes[off] = 0;
  return Status::Ok();
}

StatusOr<HostPages> HostPages::AllocateResident(size_t num_bytes, std::string_view what) {
  TF_ASSIGN_OR_RETURN(HostPages pages, Allocate(num_bytes, what));
  TF_RETURN_IF_ERROR(PopulateHostPages(pages.data(), pages.num_bytes(), what));
  return pages;
}

StatusOr<HostPages> HostPages::Allocate(size_t num_bytes, std::string_view what) {
  HostPages pages;
  if (num_bytes == 0) return pages;
  pages.data_ = AllocateHostPages(num_bytes);
  if (pages.data_ == nullptr) {
    return OutOfMemoryError("host memory: cannot allocate " + FormatBytes(num_bytes) + " for " +
                            std::string(what));
  }
  pages.num_bytes_ = num_bytes;
  return pages;
}

HostPages& HostPages::operator=(HostPages&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = other.data_;
    num_bytes_ = other.num_bytes_;
    locked_ = other.locked_;
    other.data_ = nullptr;
    other.num_bytes_ = 0;
    other.locked_ = false;
  }
  return *this;
}

Status HostPages::Lock(std::string_view what) {
  if (data_ == nullptr || locked_) return Status::Ok();
  if (mlock(data_, num_bytes_) != 0) {
    const int err = errno;
    struct rlimit limit {};
    std::string allowed = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
      allowed = limit.rlim_cur == RLIM_INFINITY ? "unlimited" : FormatBytes(limit.rlim_cur);
    }
    return ResourceExhaustedError(
        "cannot page-lock the " + FormatBytes(num_bytes_) + " of " + std::string(what) + " (" +
        std::strerror(err) + "; RLIMIT_MEMLOCK is " + allowed +
        "): raise the limit (ulimit -l, or LimitMEMLOCK= for a service), or leave it pageable");
  }
  locked_ = true;
  return Status::Ok();
}

void HostPages::Reset() {
  if (locked_) munlock(data_, num_bytes_);
  FreeHostPages(data_, num_bytes_);
  data_ = nullptr;
  num_bytes_ = 0;
  locked_ = false;
}

}  // namespace tierflow

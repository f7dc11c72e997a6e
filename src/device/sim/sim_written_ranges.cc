// The sim device's interval set of possibly non-zero bytes.
#include "device/sim/sim_written_ranges.h"

#include <algorithm>
#include <iterator>

namespace tierflow {

void SimWrittenRanges::MarkWritten(const void* ptr, size_t n) {
  if (n == 0) return;
  uintptr_t lo = reinterpret_cast<uintptr_t>(ptr), hi = lo + n;
  std::lock_guard<std::mutex> lock(mu_);
  // Merge with every range that overlaps or touches [lo, hi).
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin() && std::prev(it)->second >= lo) --it;
  while (it != ranges_.end() && it->first <= hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(lo, hi);
}

void SimWrittenRanges::Remove(uintptr_t lo, uintptr_t hi,
                              std::vector<std::pair<char*, size_t>>* out) {
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin() && std::prev(it)->second > lo) --it;
  while (it != ranges_.end() && it->first < hi) {
    const uintptr_t a = it->first, b = it->second;
    it = ranges_.erase(it);
    if (a < lo) ranges_.emplace(a, lo);
    if (b > hi) ranges_.emplace(hi, b);
    const uintptr_t cut_lo = std::max(a, lo), cut_hi = std::min(b, hi);
    if (out != nullptr && cut_hi > cut_lo) {
      out->emplace_back(reinterpret_cast<char*>(cut_lo), cut_hi - cut_lo);
    }
  }
}

std::vector<std::pair<char*, size_t>> SimWrittenRanges::TakeWritten(void* ptr, size_t n) {
  std::vector<std::pair<char*, size_t>> out;
  if (n == 0) return out;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  Remove(lo, lo + n, &out);
  return out;
}

std::vector<std::pair<char*, size_t>> SimWrittenRanges::FindWritten(const void* ptr,
                                                                    size_t n) const {
  std::vector<std::pair<char*, size_t>> out;
  if (n == 0) return out;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr), hi = lo + n;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin() && std::prev(it)->second > lo) --it;
  for (; it != ranges_.end() && it->first < hi; ++it) {
    const uintptr_t a = std::max(it->first, lo), b = std::min(it->second, hi);
    if (b > a) out.emplace_back(reinterpret_cast<char*>(a), b - a);
  }
  return out;
}

void SimWrittenRanges::Forget(const void* ptr, size_t n) {
  if (n == 0) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  Remove(lo, lo + n, nullptr);
}

size_t SimWrittenRanges::num_ranges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranges_.size();
}

}  // namespace tierflow

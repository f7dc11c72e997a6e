// ChunkedArray<T>: an append-only array whose elements never move, for data
// that grows while it is read and must be counted as it grows (instruction
// data's tokens and tables, row_set.h).
//
// A std::vector that grows by doubling holds up to twice its elements, and
// three times while it copies them to the larger block; here the elements
// sit in chunks that double from kFirstChunk up to kMaxChunk elements and
// then stay that size, so nothing is copied as it grows and the memory held
// is the elements plus at most one chunk not yet filled. Freeze() trims that
// last chunk to what it holds. MemoryBytesAfter(n) is what the array will
// hold once n more elements are appended: a budget can be checked before the
// allocation it would pay for.
//
// Not thread-safe for appends; const access may be concurrent.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tierflow {

template <typename T>
class ChunkedArray {
 public:
  static constexpr size_t kFirstChunk = size_t{1} << 10;  // elements
  static constexpr size_t kMaxChunk = size_t{1} << 20;    // elements
  static constexpr int kGrowingChunks = std::countr_zero(kMaxChunk / kFirstChunk);
  // Elements in the chunks that double (0 .. kGrowingChunks - 1).
  static constexpr size_t kGrowingElements = kFirstChunk * ((size_t{1} << kGrowingChunks) - 1);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  const T& operator[](size_t i) const {
    const auto [chunk, offset] = Locate(i);
    return chunks_[chunk][offset];
  }
  T& operator[](size_t i) {
    const auto [chunk, offset] = Locate(i);
    return chunks_[chunk][offset];
  }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  // REQUIRES: not frozen.
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const size_t n = ChunkSize(chunks_.size());
      chunks_.push_back(std::make_unique_for_overwrite<T[]>(n));
      capacity_ += n;
    }
    (*this)[size_++] = value;
  }

  // Host bytes held: the chunks as allocated and the table of chunks.
  uint64_t MemoryBytes() const { return BytesOf(capacity_, chunks_.size()); }
  // MemoryBytes() once `more` elements are appended (not frozen).
  uint64_t MemoryBytesAfter(size_t more) const {
    size_t capacity = capacity_, chunks = chunks_.size();
    while (capacity < size_ + more) capacity += ChunkSize(chunks++);
    return BytesOf(capacity, chunks);
  }

  // Trims the last chunk to the elements it holds; nothing may be appended
  // after. (Locate never reaches past size(), so a short last chunk is safe.)
  void Freeze() {
    if (size_ == capacity_) return;
    const size_t last = chunks_.size() - 1;
    const size_t held = size_ - (capacity_ - ChunkSize(last));
    auto trimmed = std::make_unique_for_overwrite<T[]>(held);
    for (size_t i = 0; i < held; ++i) trimmed[i] = chunks_[last][i];
    chunks_[last] = std::move(trimmed);
    capacity_ = size_;
    chunks_.shrink_to_fit();
  }

 private:
  static size_t ChunkSize(size_t chunk) {
    return chunk < static_cast<size_t>(kGrowingChunks) ? kFirstChunk << chunk : kMaxChunk;
  }
  static uint64_t BytesOf(size_t capacity, size_t chunks) {
    return static_cast<uint64_t>(capacity) * sizeof(T) +
           static_cast<uint64_t>(chunks) * sizeof(std::unique_ptr<T[]>);
  }
  struct Place {
    size_t chunk, offset;
  };
  // Chunk k < kGrowingChunks starts at element kFirstChunk * (2^k - 1).
  static Place Locate(size_t i) {
    if (i < kGrowingElements) {
      const size_t k = static_cast<size_t>(std::bit_width(i / kFirstChunk + 1)) - 1;
      return {k, i - kFirstChunk * ((size_t{1} << k) - 1)};
    }
    const size_t j = i - kGrowingElements;
    return {static_cast<size_t>(kGrowingChunks) + j / kMaxChunk, j % kMaxChunk};
  }

  std::vector<std::unique_ptr<T[]>> chunks_;
  size_t size_ = 0;
  size_t capacity_ = 0;  // elements the chunks can hold
};

}  // namespace tierflow

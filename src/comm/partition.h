// How a flat range of elements is cut among ranks: rank r owns
// [begin(r), end(r)). Every boundary but the last is a multiple of the
// alignment (the optimizer's chunk), so a rank's share is whole chunks and
// per-chunk partial sums add up in the same order whatever the world size.
#pragma once

#include <cstddef>
#include <vector>

#include "tierflow/status.h"

namespace tierflow::comm {

class Partition {
 public:
  // `count` elements in `world` parts of ceil(count / align / world) aligned
  // blocks each, the last part taking what remains (parts at the end may be
  // empty when there are fewer blocks than ranks). align >= 1, world >= 1.
  static StatusOr<Partition> Even(size_t count, int world, size_t align);

  // Explicit boundaries: bounds[0] == 0, non-decreasing, world + 1 entries.
  static StatusOr<Partition> FromBounds(std::vector<size_t> bounds);

  int world() const { return static_cast<int>(bounds_.size()) - 1; }
  size_t total() const { return bounds_.back(); }
  size_t begin(int rank) const { return bounds_[static_cast<size_t>(rank)]; }
  size_t end(int rank) const { return bounds_[static_cast<size_t>(rank) + 1]; }
  size_t size(int rank) const { return end(rank) - begin(rank); }
  size_t max_size() const;

 private:
  explicit Partition(std::vector<size_t> bounds) : bounds_(std::move(bounds)) {}
  std::vector<size_t> bounds_;
};

}  // namespace tierflow::comm

#include "comm/partition.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "comm/launch_env.h"

namespace tierflow::comm {

StatusOr<Partition> Partition::Even(size_t count, int world, size_t align) {
  if (world < 1 || world > kMaxWorldSize) {
    return InvalidArgumentError("partition: world size " + std::to_string(world) +
                                " is outside [1, " + std::to_string(kMaxWorldSize) + "]");
  }
  if (align == 0) return InvalidArgumentError("partition: alignment must be at least 1 element");
  const size_t blocks = count / align + (count % align != 0 ? 1 : 0);
  const size_t w = static_cast<size_t>(world);
  const size_t blocks_per_rank = blocks / w + (blocks % w != 0 ? 1 : 0);
  const size_t per_rank = blocks_per_rank > SIZE_MAX / align ? SIZE_MAX : blocks_per_rank * align;
  std::vector<size_t> bounds(w + 1);
  // r * per_rank without overflow (a huge alignment puts everything on rank 0).
  for (size_t r = 0; r <= w; ++r) {
    bounds[r] = r != 0 && per_rank > count / r ? count : std::min(count, r * per_rank);
  }
  bounds[w] = count;
  return Partition(std::move(bounds));
}

StatusOr<Partition> Partition::FromBounds(std::vector<size_t> bounds) {
  if (bounds.size() < 2 || bounds.size() > static_cast<size_t>(kMaxWorldSize) + 1) {
    return InvalidArgumentError("partition: " + std::to_string(bounds.size()) +
                                " boundaries do not describe 1 to " +
                                std::to_string(kMaxWorldSize) + " ranks");
  }
  if (bounds[0] != 0) return InvalidArgumentError("partition: the first boundary must be 0");
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (bounds[i] < bounds[i - 1]) {
      return InvalidArgumentError("partition: boundary " + std::to_string(i) + " (" +
                                  std::to_string(bounds[i]) + ") is below the one before (" +
                                  std::to_string(bounds[i - 1]) + ")");
    }
  }
  return Partition(std::move(bounds));
}

size_t Partition::max_size() const {
  size_t m = 0;
  for (int r = 0; r < world(); ++r) m = std::max(m, size(r));
  return m;
}

}  // namespace tierflow::comm

// Helpers of the fast CPU op paths: widen a row of T to fp32 and narrow it
// back, as Eigen arrays, and run a body over fixed chunks of rows with oneTBB.
//
// The chunking never depends on the thread count (simple_partitioner splits a
// blocked_range down to its grain deterministically), which is what makes the
// fast paths bit-identical for any number of threads.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/half.h"
#include "kernels/ops_common.h"

namespace tierflow::ops_internal {

using FloatArray = Eigen::Array<float, Eigen::Dynamic, 1>;

template <typename T>
inline void WidenRow(const T* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
}
template <>
inline void WidenRow<float>(const float* src, int64_t n, float* dst) {
  std::copy(src, src + n, dst);
}

template <typename T>
inline void NarrowRow(const float* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FromFloat<T>(src[i]);
}

// Calls body(chunk_index, begin, end) for chunks [k*chunk, min((k+1)*chunk, n)).
template <typename Body>
void ForEachChunk(int64_t n, int64_t chunk, const Body& body) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t k = r.begin(); k < r.end(); ++k) {
          body(k, k * chunk, std::min(n, (k + 1) * chunk));
        }
      },
      tbb::simple_partitioner());
}

// Adds per-chunk partial sums (num_chunks rows of `width`) into `acc` in chunk
// order, parallel over columns: a deterministic reduction.
inline void AddPartialsInOrder(const std::vector<float>& partials, int64_t num_chunks,
                               int64_t width, float* acc) {
  ForEachChunk(width, 256, [&](int64_t, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float sum = 0.0f;
      for (int64_t k = 0; k < num_chunks; ++k) sum += partials[k * width + c];
      acc[c] += sum;
    }
  });
}

}  // namespace tierflow::ops_internal

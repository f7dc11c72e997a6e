// RowSet: training data as whole rows (one sample, or several packed, per
// row) rather than a token stream: what instruction data becomes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tierflow {

// Targets equal to this are not trained on: the cross-entropy's ignore index
// (kernels/cross_entropy.h, PyTorch's -100).
inline constexpr int32_t kIgnoreTarget = -100;

struct RowSet {
  std::string name;  // the file, for errors and logs
  int seq_len = 0;   // T
  int64_t rows = 0;
  std::vector<int32_t> inputs;   // (rows, T) token ids; padding after a row's end
  std::vector<int32_t> targets;  // (rows, T) next-token ids, or kIgnoreTarget
  // (rows, T) each token's position in its sample, restarting at 0 for each
  // packed sample (MicroBatch::positions); empty when every row is one
  // sample at positions 0..T-1.
  std::vector<int32_t> positions;
};

}  // namespace tierflow

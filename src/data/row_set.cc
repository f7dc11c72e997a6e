// RowSet: appending samples, packing them into rows, writing rows out.
#include "data/row_set.h"

namespace tierflow {

RowSet::RowSet(std::string name, int seq_len, bool packed, int32_t pad)
    : name_(std::move(name)), seq_len_(seq_len), packed_(packed), pad_(pad) {}

void RowSet::Add(std::span<const int32_t> ids, const std::vector<bool>& trained) {
  for (size_t i = 0; i < ids.size(); ++i) {
    tokens_.push_back(static_cast<uint32_t>(ids[i]) | (trained[i] ? kTrainedBit : 0));
  }
  sample_ends_.push_back(tokens_.size());
  if (!packed_) return;
  const int slots = static_cast<int>(ids.size()) - 1;
  if (row_ends_.empty() || used_ + slots > seq_len_) {
    row_ends_.push_back(sample_ends_.size());
    used_ = slots;
  } else {
    row_ends_.back() = sample_ends_.size();
    used_ += slots;
  }
}

void RowSet::Finish() {
  tokens_.Freeze();
  sample_ends_.Freeze();
  row_ends_.Freeze();
}

uint64_t RowSet::MemoryBytesAfterAdding(size_t num_ids) const {
  return tokens_.MemoryBytesAfter(num_ids) + sample_ends_.MemoryBytesAfter(1) +
         (packed_ ? row_ends_.MemoryBytesAfter(1) : 0);
}

uint64_t RowSet::MemoryBytes() const {
  return tokens_.MemoryBytes() + sample_ends_.MemoryBytes() + row_ends_.MemoryBytes();
}

void RowSet::FillRow(int64_t r, int32_t* inputs, int32_t* targets, int32_t* positions) const {
  const auto row = static_cast<uint64_t>(r);
  const uint64_t first_sample = packed_ ? (row == 0 ? 0 : row_ends_[row - 1]) : row;
  const uint64_t end_sample = packed_ ? row_ends_[row] : row + 1;
  const int t = seq_len_;
  int used = 0;
  for (uint64_t s = first_sample; s < end_sample; ++s) {
    const uint64_t begin = s == 0 ? 0 : sample_ends_[s - 1];
    const int slots = static_cast<int>(sample_ends_[s] - begin) - 1;
    for (int j = 0; j < slots; ++j) {
      const uint32_t input = tokens_[begin + j];
      const uint32_t next = tokens_[begin + j + 1];
      inputs[used + j] = static_cast<int32_t>(input & ~kTrainedBit);
      targets[used + j] =
          (next & kTrainedBit) != 0 ? static_cast<int32_t>(next & ~kTrainedBit) : kIgnoreTarget;
      if (packed_) positions[used + j] = j;
    }
    used += slots;
  }
  for (int j = used; j < t; ++j) {
    inputs[j] = pad_;
    targets[j] = kIgnoreTarget;
    if (packed_) positions[j] = j - used;
  }
}

}  // namespace tierflow

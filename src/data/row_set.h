// RowSet: training data as whole rows (one sample, or several packed, per
// row) rather than a token stream: what instruction data becomes.
//
// Stored compactly: the samples' tokens end to end, each with its trained
// flag, and where each sample (and, packed, each row) ends; rows are padded
// only when FillRow writes them out for a micro-batch. So memory follows
// the tokens the samples have, not rows x seq_len: 200k samples of 20
// tokens cost about 20 MB at any seq_len, where padded rows of 256 took
// 400 MB. The arrays grow in chunks (chunked_array.h) and MemoryBytesAfter
// says what adding a sample will cost before it is added, so a reader can
// hold the set to a budget.
//
// A sample of n + 1 ids fills n slots of a row: input j is id j, and target
// j is id j + 1 where that id is trained, else kIgnoreTarget. Unpacked, row
// r is sample r, padded after its end with `pad` inputs and ignored
// targets. Packed, samples are laid end to end in the order added, a sample
// that does not fit in what is left of the current row starting the next
// one; each sample's positions restart at 0, and the padding at a row's end
// counts as one more sample with no trained target (positions 0, 1, ...).
//
// Appends are not thread-safe; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/chunked_array.h"

namespace tierflow {

// Targets equal to this are not trained on: the cross-entropy's ignore index
// (kernels/cross_entropy.h, PyTorch's -100).
inline constexpr int32_t kIgnoreTarget = -100;

class RowSet {
 public:
  RowSet() = default;  // no rows
  // `name` names the data in errors and logs (usually its file); rows of
  // `seq_len` (T) slots; `packed`: several samples per row (see above);
  // `pad`: the input id after a row's end. REQUIRES: seq_len > 0, pad >= 0.
  RowSet(std::string name, int seq_len, bool packed, int32_t pad);

  // Appends a sample: its ids and which of them are trained targets (the
  // first id's flag is unused). REQUIRES: not finished; 2 <= ids.size() <=
  // seq_len + 1; trained.size() == ids.size(); every id in [0, 2^31 - 1).
  void Add(std::span<const int32_t> ids, const std::vector<bool>& trained);
  // Trims the arrays to what they hold; nothing may be added after.
  void Finish();

  // MemoryBytes() once a sample of `num_ids` ids is added (not finished).
  uint64_t MemoryBytesAfterAdding(size_t num_ids) const;
  // Host bytes held: the tokens with their flags, and the sample and row ends.
  uint64_t MemoryBytes() const;

  const std::string& name() const { return name_; }
  int seq_len() const { return seq_len_; }
  bool packed() const { return packed_; }
  int64_t rows() const { return packed_ ? static_cast<int64_t>(row_ends_.size()) : num_samples(); }
  int64_t num_samples() const { return static_cast<int64_t>(sample_ends_.size()); }

  // Writes row r as a micro-batch row: seq_len input ids, seq_len targets
  // (next ids, or kIgnoreTarget) and, packed, seq_len positions within
  // their samples (`positions` is not touched when unpacked and may be
  // null then). REQUIRES: 0 <= r < rows().
  void FillRow(int64_t r, int32_t* inputs, int32_t* targets, int32_t* positions) const;

 private:
  // Bit 31 of a stored token: the id is a trained target. Ids are below the
  // vocabulary size, an int32, so the bit is free and the flag costs nothing.
  static constexpr uint32_t kTrainedBit = uint32_t{1} << 31;

  std::string name_;
  int seq_len_ = 0;
  bool packed_ = false;
  int32_t pad_ = 0;
  ChunkedArray<uint32_t> tokens_;       // every sample's ids, end to end, with kTrainedBit
  ChunkedArray<uint64_t> sample_ends_;  // sample i is tokens [sample_ends_[i-1], sample_ends_[i])
  ChunkedArray<uint64_t> row_ends_;     // packed: row r is samples [row_ends_[r-1], row_ends_[r])
  int used_ = 0;                        // packed: slots filled in the last row
};

}  // namespace tierflow

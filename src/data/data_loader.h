// DataLoader: cuts a TokenSource into training micro-batches (B rows of T
// input ids and T target ids, targets shifted by one), with an optional
// seeded shuffle, a held-out evaluation split, and a position that can be
// saved and restored so a resumed run sees exactly the batches it would have.
//
// Layout. The last `eval_fraction` of the tokens (at least one micro-batch,
// B*T+1 tokens) is the eval split; the rest, from token 0, is the train split.
// The train split is read as S = floor((n_train - 1) / T) sequences: sequence
// s is the T+1 tokens starting at token s*T (inputs its first T, targets its
// last T). An epoch is floor(S / B) micro-batches; micro-batch j of an epoch
// holds, as rows 0..B-1, sequences order[j*B .. j*B+B-1], where `order` is
//   no shuffle: the identity. Micro-batch k (counted from 0 across steps and
//               gradient accumulation) then takes the B*T+1 tokens starting
//               at token k*B*T: inputs the first B*T as B rows of T, targets
//               the last B*T (llm.c's convention). When the next micro-batch
//               would run past the train split it wraps to token 0 and the
//               epoch count goes up: with E = floor((n_train - 1) / (B*T)),
//               micro-batch k starts at token (k mod E)*B*T.
//   shuffle:    a permutation of [0, S) drawn per epoch by Fisher-Yates from
//               std::mt19937_64 seeded with SplitMix64(seed, epoch); the
//               sequences no whole micro-batch takes this epoch (S mod B of
//               them) are skipped, different ones each epoch. The order is a
//               pure function of (seed, epoch), so the position (epoch,
//               index) is the loader's whole state; mt19937_64 is specified
//               by the C++ standard, so it is the same on every platform.
// The eval split is always read in the llm.c layout: eval micro-batch i takes
// the B*T+1 tokens starting i*B*T into the split.
//
// Rows (CreateFromRows: instruction data, row_set.h): sequence s is row s,
// with its own targets (and positions, when packed); the last
// `eval_fraction` of the rows (at least B) are the eval split, eval
// micro-batch i being rows i*B.. of it; the train order is as above (the
// identity without shuffle, so micro-batch k takes rows kB..kB+B-1).
//
// Not thread-safe; const methods may be called concurrently with each other.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/row_set.h"
#include "data/token_source.h"

namespace tierflow {

struct DataLoaderOptions {
  int batch = 0;                // B, rows per micro-batch; REQUIRED > 0
  int seq_len = 0;              // T, tokens per row; REQUIRED > 0
  bool shuffle = true;          // Default: true
  uint64_t seed = 0;            // shuffle seed. Default: 0
  double eval_fraction = 0.05;  // share of tokens held out, in [0, 1); 0 = none. Default: 0.05
};

// One micro-batch in host memory: ids as int32, row-major. For the engine's
// MicroBatch: {inputs.data(), targets.data(), ..., batch, seq_len}.
struct TokenBatch {
  int batch = 0;
  int seq_len = 0;
  std::vector<int32_t> inputs;   // (batch, seq_len)
  std::vector<int32_t> targets;  // (batch, seq_len): inputs shifted left by one token
  // (batch, seq_len) positions within packed samples (RowSet::positions), or
  // empty: each row one sequence at 0..T-1.
  std::vector<int32_t> positions;
};

// Where the train stream is: `index` micro-batches of epoch `epoch` have been
// taken. Invariant: 0 <= index < batches_per_epoch().
struct DataPosition {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const DataPosition&) const = default;
};

class DataLoader {
 public:
  // Errors (InvalidArgument, naming the source): batch or seq_len <= 0;
  // eval_fraction outside [0, 1); fewer tokens than one micro-batch needs
  // (B*T+1), for the train split or, when eval_fraction > 0, for both splits.
  static StatusOr<DataLoader> Create(TokenSource tokens, const DataLoaderOptions& options);
  // Over whole rows. Errors (InvalidArgument, naming the rows): as above, and
  // options.seq_len != rows.seq_len, or fewer rows than one micro-batch (B)
  // for the train split or, when eval_fraction > 0, for both.
  static StatusOr<DataLoader> CreateFromRows(RowSet rows, const DataLoaderOptions& options);

  // Fills `out` with the next train micro-batch and advances the position.
  void Next(TokenBatch* out);
  // The train micro-batch at `position`, without moving. REQUIRES: a valid
  // position (0 <= index < batches_per_epoch(), epoch >= 0).
  void TrainBatchAt(const DataPosition& position, TokenBatch* out);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t num_eval_batches() const { return num_eval_batches_; }
  // Eval micro-batch i. REQUIRES: 0 <= i < num_eval_batches().
  void EvalBatch(int64_t i, TokenBatch* out) const;

  DataPosition position() const { return position_; }
  // Moves to `position`. Errors: InvalidArgument for a negative epoch or an
  // index outside [0, batches_per_epoch()).
  Status Seek(const DataPosition& position);

  // The position and the settings it is only meaningful with, as JSON:
  // {"format": "tierflow.data_loader", "version": 1, "epoch", "index",
  //  "shuffle", "seed", "batch", "seq_len", "num_tokens", "num_train_tokens"}.
  nlohmann::json SaveState() const;
  // Restores a SaveState. Errors: InvalidArgument when the JSON is not a
  // data-loader state (missing or mistyped keys, other format or version);
  // FailedPrecondition naming the setting when it was saved with other
  // settings or data (resuming then would not replay the same batches).
  Status RestoreState(const nlohmann::json& state);

  const TokenSource& tokens() const { return tokens_; }
  const DataLoaderOptions& options() const { return options_; }
  int64_t num_train_tokens() const { return num_train_tokens_; }
  int64_t num_eval_tokens() const { return NumTokens() - num_train_tokens_; }
  // Token cells in the data: the stream's tokens, or rows x seq_len.
  int64_t NumTokens() const {
    return rows_ ? rows_->rows() * static_cast<int64_t>(rows_->seq_len()) : tokens_.size();
  }
  const std::string& DataName() const { return rows_ ? rows_->name() : tokens_.name(); }
  // Host bytes the loader holds, or will once its data is read: the tokens
  // (in memory, or a mapped file whose pages the reads bring in; rows as
  // RowSet stores them, unpadded) and one epoch's order of sequences. The
  // planner counts them.
  uint64_t MemoryBytes() const {
    const uint64_t data = rows_ ? rows_->MemoryBytes()
                                : static_cast<uint64_t>(tokens_.size()) *
                                      static_cast<uint64_t>(tokens_.element_bytes());
    return data + static_cast<uint64_t>(num_sequences_) * sizeof(int64_t);
  }
  // The rows (CreateFromRows), or null for a token stream.
  const RowSet* rows() const { return rows_.get(); }

 private:
  DataLoader() = default;
  // The order of sequences in `epoch` (cached for the current epoch).
  const std::vector<int64_t>& OrderFor(int64_t epoch);
  void FillRows(const int64_t* starts, TokenBatch* out) const;
  // Rows mode: copies rows `indices` (B of them).
  void CopyRows(const int64_t* indices, TokenBatch* out) const;

  TokenSource tokens_;
  std::shared_ptr<const RowSet> rows_;  // rows mode when set
  DataLoaderOptions options_;
  int64_t num_train_tokens_ = 0;
  int64_t num_sequences_ = 0;  // S
  int64_t batches_per_epoch_ = 0;
  int64_t num_eval_batches_ = 0;
  DataPosition position_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace tierflow

// Reading a trained model's state out of an OffloadEngine: all fp32 master
// weights at once (GatherMasterWeights, for tests and small models), or any
// range of a unit's master weights or moments through one sub-group at a
// time (StateRangeReader, for streaming saves: a checkpoint of an 8B model
// must not hold its 32 GB of masters in RAM beside the optimizer state).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/offload_engine.h"
#include "tierflow/status.h"

namespace tierflow {

// (layout().total_params,) fp32 masters. Calls Finish() first so the last
// step's updates are in. REQUIRES: no Step in flight (called from the thread
// that drives the engine). Errors: those of Finish and ReadState.
StatusOr<std::vector<float>> GatherMasterWeights(OffloadEngine& engine);

// With data parallelism (engine.world_size() > 1) each rank holds its parts
// of every unit, and reading is a collective led by rank 0: rank 0 calls
// Read (any range of any unit, as with one rank) while every other rank
// calls Serve, which answers rank 0's reads with its parts until rank 0
// calls EndServing. Reads go in pieces of at most kServePieceParams, each
// an all-gather of the owners' shares, so no rank holds more than a piece
// and a sub-group; a rank whose read fails is known to all at once (the
// piece's outcome is agreed), and serving goes on until EndServing.
class StateRangeReader {
 public:
  enum class Array { kMaster, kExpAvg, kExpAvgSq };
  static constexpr uint64_t kServePieceParams = uint64_t{1} << 22;
  // REQUIRES: the engine is idle (after Finish) while the reader is used.
  explicit StateRangeReader(OffloadEngine& engine) : engine_(engine) {}
  // Copies `count` values of `array` of unit `unit`, from unit offset
  // `offset`, to `out`. Reads that array of each sub-group it touches (the
  // NVMe tier reads only its blocks) and keeps the last one per array, so
  // reading a unit's arrays front to back, one after another, reads the
  // state once. Errors: InvalidArgument
  // for a range outside the unit; those of ReadState (with data
  // parallelism, any rank's, named). REQUIRES: rank 0, or one rank.
  Status Read(int unit, Array array, uint64_t offset, uint64_t count, float* out);
  // Ranks other than 0: answers rank 0's reads until its EndServing.
  // Returns the first read that failed anywhere (after serving on), or the
  // communicator's error.
  Status Serve();
  // Rank 0: ends every other rank's Serve. Call it once per serving
  // session, whether or not a reader was used (a save may fail before it
  // reads anything).
  static Status EndServing(OffloadEngine& engine);
  // Host bytes it holds: one sub-group's three arrays (the planner counts them).
  uint64_t buffer_bytes() const { return 3 * master_.capacity() * sizeof(float); }

 private:
  // This rank's values of [offset, offset + count) of the unit, within its part.
  Status ReadLocal(int unit, Array array, uint64_t offset, uint64_t count, float* out);
  // One piece of a data-parallel read, on every rank: `out` receives the
  // whole range (rank 0: the caller's; others: scratch_).
  Status ServePiece(int unit, Array array, uint64_t offset, uint64_t count, float* out);

  OffloadEngine& engine_;
  std::vector<float> scratch_;
  int cached_group_[3] = {-1, -1, -1};  // per Array
  std::vector<float> master_, exp_avg_, exp_avg_sq_;
};

}  // namespace tierflow

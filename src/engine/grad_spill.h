// Gradients on the drives (EngineOptions::grad_offload kNvme): no whole-model
// gradient in host memory. Each landed piece of a unit is copied (one
// micro-batch: the transfer dtype) or summed in fp32 (several) into a small
// pool of pinned sub-group slots; a sub-group complete for this micro-batch
// is written at once, as tensor "<sub-group>/grad" of the NVMe state store
// beside its state (same block accounting, CRC32C and write-to-new-block
// rules), and read back only where it is needed again: the next micro-batch's
// sum, or the update after the step's decision, when its slot has been
// reused. A slot with a write in flight is never reused before the write
// lands, so a read never sees an older step's or micro-batch's blocks.
//
// With several micro-batches, the final one's sums also give each unit's
// statistics (UnitChunkSums): the bits the host accumulator's GradStats gives.
//
// Errors name the sub-group and the file (the store's), and say what to do;
// the engine fails the step with them (the last checkpoint is untouched).
//
// Thread safety: the optimizer worker alone drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/host_memory.h"
#include "engine/sub_groups.h"
#include "engine/unit_chunk_sums.h"
#include "offload/state_store.h"
#include "tierflow/device.h"

namespace tierflow {

class GradSpill {
 public:
  struct Config {
    DType dtype = DType::kF32;  // slots and files: the transfer dtype (one micro-batch) or fp32
    int slots = 4;              // pinned sub-group slots, >= 2
  };
  // `tensors[g]`: sub-group g's gradient tensor in `store` (of
  // layout.groups[g].num_params x DTypeSize(dtype) bytes). `layout`, `store`
  // and `device` outlive the spill.
  static StatusOr<std::unique_ptr<GradSpill>> Create(Device& device, const SubGroupLayout& layout,
                                                     offload::StateStore& store,
                                                     std::vector<offload::TensorId> tensors,
                                                     const Config& config);
  ~GradSpill();  // waits for writes in flight

  DType dtype() const { return config_.dtype; }
  uint64_t host_bytes() const { return slot_bytes_ * slots_.size(); }
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t bytes_written() const { return bytes_written_; }

  // A piece [begin, begin + n) of unit u's gradient in `src_dtype`, for
  // micro-batch `micro` (0-based) of `micro_batches`. In one micro-batch a
  // unit's pieces are disjoint and cover it (PieceLedger checks that first).
  // `summed`: src is already the sum through `micro` (data parallelism: the
  // ranks' reduce-scatter adds into the running sum, ReadInto), so it is
  // copied, in dtype(), and no unit statistics are taken.
  Status Take(int u, uint64_t begin, const void* src, DType src_dtype, uint64_t n, int micro,
              int micro_batches, bool summed = false);
  // Copies sub-group g's latest sum (the micro-batch before the one being
  // summed) into `dst` (num_params of dtype()): from its slot, else the drive.
  Status ReadInto(int g, void* dst);
  // Several micro-batches: unit u's statistics over its summed gradient,
  // once the final micro-batch has taken all of it.
  StatusOr<GradStatsResult> UnitStats(int u) const;

  // Starts reading sub-group g's gradient (this step's whole) into a free
  // slot; does nothing where it is in one already, no slot is free, or this
  // step's gradient of g is not complete yet.
  Status Prefetch(int g);
  // This step's gradient of sub-group g, in dtype(); valid until Release(g).
  StatusOr<const void*> Acquire(int g);
  void Release(int g);
  // The step is over: waits for every write (the first error, naming its
  // sub-group), and forgets what the slots hold.
  Status EndStep();

 private:
  struct Slot {
    PinnedBuffer buffer;
    int group = -1;
    int micro = -1;         // the micro-batch whose sum (through it) the buffer holds
    uint64_t filled = 0;    // params taken of `micro`; complete at num_params
    bool filling = false;   // being assembled: not on disk, not reusable
    int holds = 0;          // Acquire without Release
    uint64_t last_use = 0;  // for least-recently-used reuse
    offload::IoTicket write, read;
    bool writing = false, reading = false;
  };
  GradSpill(const SubGroupLayout& layout, offload::StateStore& store,
            std::vector<offload::TensorId> tensors, const Config& config)
      : layout_(layout), store_(store), tensors_(std::move(tensors)), config_(config) {}
  uint64_t GroupBytes(int g) const;
  int SlotOf(int g) const;
  bool Busy(const Slot& s) const { return s.filling || s.holds > 0 || s.writing || s.reading; }
  // Waits for the slot's write (or read); a failure names the sub-group and
  // what to do, and the slot no longer counts as holding it.
  Status Settle(Slot& s, bool write);
  Status SettleWrite(Slot& s) { return Settle(s, /*write=*/true); }
  Status SettleRead(Slot& s) { return Settle(s, /*write=*/false); }
  // A slot to reuse: empty, else the least recently used idle one; waits
  // for a write to land when `wait` (-1: none without waiting).
  StatusOr<int> FreeSlot(bool wait);
  Status StartRead(int g, int slot, int micro);
  // The slot that sums sub-group g for micro-batch `micro`.
  StatusOr<int> SlotForTake(int g, int micro, bool add_to_previous);
  Status Complete(int g, Slot& s, int micro_batches);
  void ResetUnitSums();

  const SubGroupLayout& layout_;
  offload::StateStore& store_;
  std::vector<offload::TensorId> tensors_;
  Config config_;
  std::vector<Slot> slots_;
  uint64_t slot_bytes_ = 0, clock_ = 0;
  uint64_t bytes_read_ = 0, bytes_written_ = 0;
  int final_micro_ = 0;  // this step's last micro-batch: its sums are the step's gradient
  // Per sub-group: this step's gradient is complete (written, or being
  // written); before that its file holds an older one, which nothing may read.
  std::vector<char> complete_;
  std::vector<UnitChunkSums> unit_sums_;  // per unit, the final micro-batch's
};

}  // namespace tierflow

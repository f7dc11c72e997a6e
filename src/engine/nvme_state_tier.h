// Optimizer state on NVMe: each sub-group's master weights and moments are
// a tensor ([master | exp_avg | exp_avg_sq], each array padded to 4 KiB) in
// the io_uring StateStore, moved through a small pool of pinned slots:
// Prefetch starts a read into a free slot, Acquire waits for it,
// Release(modified) starts the write-behind and frees the slot once it
// lands. A sub-group still being written is taken over from its slot
// without a read.
//
// With two_copies (the overlapped pipeline), each sub-group has two tensors,
// "<sub-group>/state.0" and ".1"; every write goes to the copy that is not
// current, so a speculative update (ReleaseSpeculative) streams to disk
// during backward while the current copy stays intact until Commit; Abort is
// free. This doubles the NVMe space (24 B/param instead of 12); the planner
// counts it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/trace.h"
#include "engine/state_tier.h"
#include "engine/sub_groups.h"
#include "engine/swap_store_options.h"
#include "offload/state_store.h"
#include "tierflow/device.h"

namespace tierflow {

struct NvmeTierOptions {
  SwapSetConfig swap;       // where and how (swap.paths REQUIRES: non-empty)
  int slots = 4;            // pinned sub-group buffers. Default: 4
  bool two_copies = false;  // A/B copies per sub-group (speculation). Default: false
  // Gradients on the drives (engine/grad_spill.h): a "<sub-group>/grad"
  // tensor per sub-group of num_params x DTypeSize(*grad_dtype) bytes, and
  // spare blocks for `grad_slots` of them in flight. Default: none.
  std::optional<DType> grad_dtype;
  int grad_slots = 0;
  TraceRecorder* trace = nullptr;
};

class NvmeStateTier : public StateTier {
 public:
  // Creates the swap set for `groups` (indices into layout.groups) and the
  // slots (pinned memory from `device`). Errors: those of StateStore::Create
  // (stale set, no O_DIRECT, disk space) and pinned out-of-memory.
  static StatusOr<std::unique_ptr<NvmeStateTier>> Create(const SubGroupLayout& layout,
                                                         const std::vector<int>& groups,
                                                         const NvmeTierOptions& options,
                                                         Device& device);
  ~NvmeStateTier() override;  // waits for writes; removes the swap files

  std::string_view name() const override { return "nvme"; }
  Status Write(int g, const float* master, const float* exp_avg, const float* exp_avg_sq) override;
  Status Read(int g, float* master, float* exp_avg, float* exp_avg_sq) override;
  Status Prefetch(int g) override;
  Status PrefetchWaitingForWrites(int g) override;
  StatusOr<StateView> Acquire(int g) override;
  Status Release(int g, bool modified) override;
  bool SpeculatesOutOfPlace() const override { return options_.two_copies; }
  Status ReleaseSpeculative(int g) override;
  Status Commit(int g) override;
  Status Abort(int g) override;
  Status Flush() override;
  TierStats Stats() const override;

  offload::StateStore& store() { return *store_; }
  // Per sub-group (indexed as layout.groups), its gradient tensor; empty
  // without grad_dtype.
  const std::vector<offload::TensorId>& grad_tensors() const { return grad_tensor_of_; }

 private:
  enum class SlotState { kFree, kReading, kHeld, kWriting };
  struct Slot {
    PinnedBuffer buffer;
    SlotState state = SlotState::kFree;
    int group = -1;
    int copy = 0;  // which of the group's copies the buffer holds
    offload::IoTicket ticket;
  };
  class CompletionWatcher;

  NvmeStateTier(const SubGroupLayout& layout, const NvmeTierOptions& options);
  uint64_t ArrayStride(int g) const;  // bytes per array, padded to 4 KiB
  uint64_t TensorBytes(int g) const { return 3 * ArrayStride(g); }
  // The slot holding g's current copy, or -1.
  int SlotOf(int g) const;
  offload::TensorId TensorOf(int g, int copy) const { return tensor_of_[g] + copy; }
  Status StartWrite(int g, int slot_index, int copy);
  StatusOr<int> FreeSlot(bool wait);
  Status StartRead(int g, int slot);
  StateView ViewOf(int g, Slot& slot);
  Status Settle(Slot& slot);  // waits for the slot's I/O; a write frees it
  // Settles every write that has landed, so its slot counts as free.
  Status ReclaimFinishedWrites();
  Status StartPrefetch(int g, bool wait_for_writes);

  const SubGroupLayout& layout_;
  NvmeTierOptions options_;
  std::unique_ptr<offload::StateStore> store_;
  std::vector<offload::TensorId> tensor_of_;  // per sub-group: copy 0; copy 1 follows
  std::vector<offload::TensorId> grad_tensor_of_;
  std::vector<int> current_;   // per sub-group: the current copy
  std::vector<char> pending_;  // per sub-group: a speculative copy awaits Commit
  std::vector<Slot> slots_;
  std::unique_ptr<CompletionWatcher> watcher_;
  uint64_t bytes_read_ = 0, bytes_written_ = 0, slot_bytes_ = 0;
};

}  // namespace tierflow

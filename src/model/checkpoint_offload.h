// Activation checkpoints in pinned host memory (TrainShape::offload_checkpoints).
//
// Under activation checkpointing the model keeps each block's input, the
// residual stream r = 0..L-1 (and r = L, the head's input): L + 1 tensors
// of (N, C) on the device, 8 GiB for Llama-3-8B at 32K tokens. With the
// offload the device holds a ring of kSlots of them (residual r in slot
// r % kSlots) and the others live in a pinned host store:
//
//   forward   block l writes r = l + 1 into its slot once the D2H of the
//             slot's previous residual (r - kSlots) is done; each residual
//             r < L + 1 - kSlots goes down on its own D2H stream as soon as
//             it is written, overlapped with the next block.
//   backward  the last kSlots residuals never left; before block l's
//             recompute, residual l - 1 starts up on its own H2D stream into
//             the slot that block l + 1 finished with, overlapped with
//             block l; block l - 1 waits for it.
//
// Three slots: block l's input, its recompute's output and the prefetch of
// block l - 1's input. The copies move the bits unchanged, so a run with the
// offload is bit-identical to one without. Every wait is a stream event:
// the host never blocks, except that Check synchronizes the two copy
// streams (done by then) to report their errors.
//
// Thread safety: one micro-batch at a time (the model's contract).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow::model_internal {

class CheckpointOffload {
 public:
  static constexpr int kSlots = 3;

  // Device ring slots a model of `num_layers` blocks uses (at most L + 1).
  static int DeviceSlots(int num_layers);
  // Residuals kept in host memory: r = 0 .. L - kSlots (none when L < kSlots).
  static int HostCheckpoints(int num_layers);

  // `slots`: DeviceSlots(num_layers) device buffers of `bytes_each` (the
  // model carves them). Allocates HostCheckpoints x bytes_each of pinned
  // memory (OutOfMemory names it) and the two copy streams.
  static StatusOr<std::unique_ptr<CheckpointOffload>> Create(Device& device, int num_layers,
                                                             uint64_t bytes_each,
                                                             std::vector<void*> slots);

  void* Slot(int r) const { return slots_[static_cast<size_t>(r % kSlots)]; }

  // Forward. Before compute writes residual r: waits for the save of the
  // residual that held its slot.
  Status BeforeWrite(Stream& compute, int r);
  // After compute has enqueued the write of residual r (`bytes` of it):
  // saves it to the host store when it is one the ring will overwrite.
  Status AfterWrite(Stream& compute, int r, uint64_t bytes);
  // Backward, before block l's work is enqueued: compute waits for its
  // input's load (when it was saved), and block l - 1's input starts up
  // into the slot block l + 1 left.
  Status BeforeBackward(Stream& compute, int l, uint64_t bytes);
  // Errors of the copy streams, which by the end of a micro-batch's
  // backward have finished their work (compute waited on all of it).
  Status Check();

  uint64_t host_bytes() const { return host_bytes_; }

 private:
  CheckpointOffload() = default;
  bool Saved(int r) const { return r >= 0 && r < host_checkpoints_; }
  Status Load(Stream& compute, int r, uint64_t bytes);

  int host_checkpoints_ = 0;
  uint64_t bytes_each_ = 0;
  uint64_t host_bytes_ = 0;
  std::vector<void*> slots_;
  PinnedBuffer host_;
  std::unique_ptr<Stream> d2h_, h2d_;
  // Per slot: compute wrote it; its D2H finished; compute is done with it;
  // its H2D finished.
  std::vector<std::unique_ptr<Event>> written_, saved_, released_, loaded_;
};

}  // namespace tierflow::model_internal

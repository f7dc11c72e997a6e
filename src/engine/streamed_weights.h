// Streamed weights (ZeRO-Infinity's parameter offload): the 16-bit working
// weights of the units that do not stay on the device, and the ring of
// device slots they are uploaded into ahead of use.
//
// A streamed unit's weights live in pinned host memory (kHost) or in a swap
// set on NVMe (kNvme: one tensor per unit, read into pinned staging, then
// uploaded). The model takes a unit's weights (Take) and gives them back
// (Release) in the order of its WeightsSchedule; a pass (one Step, or one
// EvaluateLoss) is that schedule once per micro-batch. Knowing the order,
// the ring uploads up to `prefetch_depth` fetches ahead of the one being
// taken, on its own stream, into a slot nobody holds: a free one, or the
// one whose unit is needed again latest (Belady's choice: the sequence is
// known). A fetch whose unit is still in a slot from an earlier fetch of the
// same pass uploads nothing. A slot is overwritten only after the compute
// stream has passed the Release of everything that read it (an event), and
// the compute stream reads a slot only after its upload (another event).
//
// Updated weights come back from the optimizer (WriteRange, FinishUnit) and
// replace the unit's copy; the next pass fetches a unit only once `ready`
// says its update is in. Slot contents are dropped at each pass's start, so
// no fetch ever sees weights older than the copy.
//
// Thread safety: Take, Release, Pump, BeginPass and EndPass on the thread
// that drives the model; WriteRange and FinishUnit on one other thread (the
// optimizer worker), or the driving thread when the engine is idle.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/device_spans.h"
#include "engine/engine_options.h"
#include "engine/swap_store_options.h"
#include "engine/trainable.h"
#include "offload/aligned_buffer.h"
#include "offload/state_store.h"
#include "tierflow/device.h"

namespace tierflow {

// The swap set of a run's streamed weights on NVMe: its own, beside the
// optimizer state's (a run id names one set), "RUN-params".
std::string StreamedWeightsRunId(const std::string& run_id);

class StreamedWeights {
 public:
  struct Config {
    ParamStreaming params;
    DType dtype = DType::kBF16;
    // kNvme: where and how the swap set lives (as the optimizer state's
    // tier; its run_id gets "-params").
    SwapSetConfig nvme;
    DeviceSpans* spans = nullptr;  // not owned; spans of the uploads ("h2d_params")
  };
  // Whether unit `unit`'s latest update is in its copy. With `wait`, blocks
  // until it is; an error ends the pass (the optimizer failed).
  using ReadyFn = std::function<StatusOr<bool>(int unit, bool wait)>;

  // Validates the configuration against `units` and `schedule` (every
  // streamed unit must appear in it), allocates the slots (the error names
  // their bytes when the device lacks them), the host copy or the swap set
  // and staging. The copy's contents are undefined until WriteRange.
  static StatusOr<std::unique_ptr<StreamedWeights>> Create(Device& device,
                                                           const std::vector<UnitInfo>& units,
                                                           const std::vector<int>& schedule,
                                                           const Config& config);
  // Waits for the ring's stream and the swap set's writes; removes the swap set.
  ~StreamedWeights();
  StreamedWeights(const StreamedWeights&) = delete;
  StreamedWeights& operator=(const StreamedWeights&) = delete;

  bool streamed(int unit) const { return streamed_[static_cast<size_t>(unit)] != 0; }
  uint64_t streamed_params() const { return streamed_params_; }
  uint64_t slot_params() const { return slot_params_; }

  // A pass of `micro_batches` repetitions of the schedule begins; slot
  // contents from earlier passes are dropped. REQUIRES: the previous pass ended.
  Status BeginPass(int micro_batches, ReadyFn ready);
  // Issues the uploads the ring has room for, up to prefetch_depth fetches
  // ahead of the next Take; never waits.
  Status Pump();
  // The device pointer of unit `unit`'s weights, the next fetch of the
  // schedule: the compute stream waits for its upload. FailedPrecondition
  // when the model takes another unit than the schedule says, or holds
  // every slot.
  StatusOr<void*> Take(int unit, Stream& compute);
  // The compute stream has been given every read of the unit's slot.
  Status Release(int unit, Stream& compute);
  // Every fetch of the pass was taken and released; returns the first error
  // of the ring's stream.
  Status EndPass();
  // Bytes uploaded into slots and read from NVMe since the last call.
  struct Transferred {
    uint64_t h2d_bytes = 0, nvme_read_bytes = 0;
  };
  Transferred TakeTransferred();

  // Optimizer side: `count` elements (weights dtype) at `unit_offset` of
  // streamed unit `unit` replace the copy's. Once every range of the unit is
  // written, FinishUnit makes it the copy (kNvme: writes it; the next fetch
  // of the unit waits for the write).
  Status WriteRange(int unit, uint64_t unit_offset, const void* src, uint64_t count);
  // Where those `count` elements go, for a producer that writes them in
  // place (the optimizer's copy out) instead of through WriteRange: the host
  // copy (kHost) or the unit's write-back buffer (kNvme). Valid until
  // FinishUnit; the same rules as WriteRange.
  StatusOr<void*> RangeForWrite(int unit, uint64_t unit_offset, uint64_t count);
  Status FinishUnit(int unit);
  // Waits for every write to the swap set.
  Status Flush();
  // Reads unit `unit`'s copy (weights dtype). REQUIRES: no pass in flight.
  Status ReadUnit(int unit, void* out);
  // Host bytes: the pinned copy (kHost) or the staging and write-back
  // buffers (kNvme); NVMe bytes of the swap set.
  uint64_t HostBytes() const;
  uint64_t NvmeFileBytes() const;

 private:
  struct Slot {
    DeviceBuffer buffer;
    int unit = -1;                    // whose weights it holds or is receiving; -1: none
    int pins = 0;                     // issued fetches not yet released
    std::unique_ptr<Event> loaded;    // after its upload
    std::unique_ptr<Event> released;  // after the reads of its last released fetch
  };
  struct Staging {
    PinnedBuffer buffer;
    std::unique_ptr<Event> copied;  // after the upload out of it
  };
  struct WriteBack {
    offload::AlignedBuffer buffer;
    offload::IoTicket ticket;  // its last write
  };

  explicit StreamedWeights(const Config& config) : config_(config) {}
  // Create's steps: the configuration alone; the device slots and the
  // upload stream; with kNvme, the swap set, staging and write-back buffers.
  static Status CheckConfig(const Config& config);
  Status AllocateSlots(Device& device);
  Status CreateSwapSet(Device& device, const std::vector<UnitInfo>& units);
  size_t wbytes() const { return DTypeSize(config_.dtype); }
  uint64_t UnitBytes(int unit) const { return unit_params_[unit] * wbytes(); }
  // Issues fetch `index` of the pass if a slot (and, for kNvme, staging and
  // the unit's last write) allows; `wait`: block until they do. Sets *issued.
  Status Issue(uint64_t index, bool wait, bool* issued);
  // The slot to overwrite for fetch `index`: unpinned, empty or needed latest; -1: none.
  int ChooseSlot(uint64_t index) const;
  int UnitOfFetch(uint64_t index) const { return fetch_units_[index % fetch_units_.size()]; }

  Config config_;
  std::vector<char> streamed_;
  std::vector<uint64_t> unit_params_;
  std::vector<std::string> unit_names_;
  std::vector<uint64_t> host_offset_;  // kHost: elements into host_copy_
  std::vector<int> fetch_units_;       // the schedule's streamed entries
  uint64_t streamed_params_ = 0, slot_params_ = 0;

  std::unique_ptr<Stream> stream_;
  std::vector<Slot> slots_;
  PinnedBuffer host_copy_;  // kHost
  // kNvme
  std::unique_ptr<offload::StateStore> store_;
  std::vector<offload::TensorId> tensor_of_;
  std::vector<Staging> staging_;
  size_t next_staging_ = 0;
  std::vector<WriteBack> write_back_;  // optimizer side
  size_t next_write_back_ = 0;
  int assembling_unit_ = -1;  // the unit WriteRange is filling (kNvme)
  int assembling_buffer_ = -1;
  std::mutex writes_mu_;
  std::vector<offload::IoTicket> unit_write_;  // per unit: its copy's last write

  // The pass (driving thread).
  ReadyFn ready_;
  bool in_pass_ = false;
  uint64_t pass_fetches_ = 0;    // micro-batches x fetch_units_.size()
  uint64_t next_take_ = 0;       // the fetch the model takes next
  uint64_t issued_upto_ = 0;     // fetches [next_take_, issued_upto_) are issued
  std::vector<int> fetch_slot_;  // per fetch of the pass: its slot
  std::vector<int> held_slot_;   // per unit: the slot it is taken from, or -1
  Transferred transferred_;
};

}  // namespace tierflow

// The OffloadEngine: ZeRO-Offload / ZeRO-Infinity's step pipeline.
//
// Working weights live on the device; each unit's gradients leave the device
// (cast to the gradient transfer dtype, D2H on their own stream) as soon as
// backward has finished that unit; the host accumulates them in fp32
// (pinned) and the CPU optimizer updates the fp32 master weights and Adam
// moments, sub-group by sub-group, from host RAM or NVMe (read-ahead,
// write-behind); updated weights go back per sub-group
// (H2D on their own stream) and the next forward waits only for the unit it
// needs.
//
// Exactness: global-norm clipping and the fp16 overflow check need the whole
// gradient. With Pipeline::kOverlapped the optimizer speculates during
// backward (assuming no clipping and no overflow); if the final norm says
// otherwise, the speculative updates are rolled back and redone, so the
// result is always bit-identical to Pipeline::kSynchronous. After the
// decision, sub-groups are updated in forward order, overlapping the next
// step's forward.
//
// The engine coordinates its parts: the gradient inbox (engine/grad_inbox.h:
// buckets and landing) with the compute thread's piece ledger
// (engine/piece_ledger.h), the committer (engine/committer.h: speculation,
// the decision, rollback) and the data-parallel strategy
// (engine/data_parallel_strategy.h; one process is a world of one).
//
// Thread safety: Step/Finish/Read* are called from one thread (the compute
// thread). Internally a worker thread runs the host side; device streams run
// in parallel. What only the worker touches is in WorkerParts, which the
// worker's thread takes at start; what both touch is under mu_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/partition.h"
#include "common/host_memory.h"
#include "common/trace.h"
#include "engine/committer.h"
#include "engine/data_parallel_strategy.h"
#include "engine/device_spans.h"
#include "engine/engine_options.h"
#include "engine/grad_inbox.h"
#include "engine/grad_spill.h"
#include "engine/loss_scaler.h"
#include "engine/piece_ledger.h"
#include "engine/state_tier.h"
#include "engine/streamed_weights.h"
#include "engine/sub_groups.h"
#include "engine/trainable.h"
#include "optim/grad_stats.h"
#include "tierflow/device.h"

namespace tierflow {

class OffloadEngine : public UnitAccess {
 public:
  // Allocates everything the run needs (device weights and gradient buckets,
  // pinned accumulators and staging, the state tier) and uploads the model's
  // initial weights. Any out-of-memory is reported here, before training
  // touches anything. `device` and `model` must outlive the engine.
  static StatusOr<std::unique_ptr<OffloadEngine>> Create(Device& device, Trainable& model,
                                                         const EngineOptions& options);
  // Waits for in-flight work, then closes the state tier (removing NVMe swap files).
  ~OffloadEngine() override;

  // Forward and backward of every micro-batch, then one optimizer step.
  // Returns once the step's outcome is known (loss, norm, skipped or not);
  // updates of later sub-groups may still be running: the next Step's
  // forward waits per unit, and Finish waits for all of it.
  StatusOr<StepStats> Step(const std::vector<MicroBatch>& micro_batches);
  // Waits until the last step's updates are on the device; returns its full
  // statistics (stage times, bytes, overlap).
  StatusOr<StepStats> Finish();

  // The learning rate of the following steps (schedules).
  void SetLearningRate(float lr);
  // Whether this process wants to stop (a signal): with data parallelism
  // the step's own all-gather carries it to every rank, so all agree on the
  // step to stop after (StepStats::stop_requested) without a collective of
  // the caller's while the worker's may be running.
  void SetStopRequested(bool stop) { stop_requested_.store(stop); }
  // Optimizer steps applied so far (skipped steps do not count).
  int64_t optimizer_step() const;
  LossScaler::State loss_scaler_state() const;
  // Resume: the step counter and loss scaler of a checkpoint.
  void RestoreCounters(int64_t optimizer_step, const LossScaler::State& scaler);

  // The sub-groups this rank holds state for: the whole model's, or with
  // data parallelism this rank's part of every unit (SubGroupLayout::part_begins).
  const SubGroupLayout& layout() const { return layout_; }
  // Parameters of the whole model (every rank's parts).
  uint64_t model_params() const { return grad_offsets_.empty() ? 0 : grad_offsets_.back(); }
  uint64_t unit_params(int u) const { return grad_offsets_[u + 1] - grad_offsets_[u]; }
  int rank() const { return dp_->rank(); }
  int world_size() const { return dp_->world(); }
  // Data parallelism: the communicator (null with one rank) and how unit u
  // is cut among the ranks.
  comm::Communicator* communicator() const { return dp_->comm(); }
  const comm::Partition& unit_part(int u) const { return dp_->part(u); }
  // Reads or replaces sub-group g's state (Read: a null array is skipped, and
  // the NVMe tier then reads only the blocks of the others). REQUIRES: after
  // Finish (idle).
  Status ReadState(int g, float* master, float* exp_avg, float* exp_avg_sq);
  Status WriteState(int g, const float* master, const float* exp_avg, const float* exp_avg_sq);
  // Copies the master weights to the device working weights (after
  // WriteState). With data parallelism every rank calls it (an all-gather).
  Status UploadAllWeights();
  // Reads the working weights of the whole model, as fp32: the device's, and
  // the streamed units' copy (parameter offload).
  Status ReadDeviceWeights(float* out);

  // Mean loss of `batch` with the current weights (forward and a discarded
  // backward on the compute stream). REQUIRES: idle (after Finish).
  StatusOr<float> EvaluateLoss(const MicroBatch& batch);

  // Bytes the optimizer state occupies: in host RAM (states, or NVMe slots)
  // and in NVMe swap files.
  uint64_t HostStateBytes() const;
  uint64_t NvmeFileBytes() const;
  // Parameter offload: parameters whose weights are streamed (0: none), and
  // the host and NVMe bytes of their copy.
  uint64_t StreamedParams() const { return streamed_ ? streamed_->streamed_params() : 0; }
  uint64_t StreamedHostBytes() const { return streamed_ ? streamed_->HostBytes() : 0; }
  uint64_t StreamedNvmeBytes() const { return streamed_ ? streamed_->NvmeFileBytes() : 0; }

  // UnitAccess, for the model during Step.
  StatusOr<void*> Weights(int unit) override;
  Status ReleaseWeights(int unit) override;
  uint64_t GradPieceCapacity() const override { return inbox_->bucket_params(); }
  StatusOr<float*> BeginGrads(int unit, uint64_t begin, uint64_t count) override;
  Status EndGrads(int unit) override;

 private:
  struct StagingSlot {
    PinnedBuffer buffer;  // (max_group_params,) weights dtype
    std::unique_ptr<Event> uploaded;
  };
  struct Arrival {
    int64_t step_id;
    int unit;
    uint64_t begin, count;  // the piece: parameters of the unit
    int micro;
    int bucket;
    bool stop;
  };
  struct StepContext {
    int64_t id = 0;
    int micro_batches = 1;
    // One micro-batch: each unit's gradients land in the inbox in the transfer
    // dtype (GradInbox::Landed) and the optimizer reads them there.
    bool landed = false;
    float loss_scale = 1;
    float lr = 0;
    // Filled by the worker.
    std::vector<double> unit_sum_squares;  // summed over the unit's pieces as they land
    std::vector<char> unit_non_finite;
    std::vector<uint64_t> unit_params_landed;  // final micro-batch: complete at num_params
    // Data parallelism: this rank's per-chunk sums of squares of its parts
    // of the summed gradient (GradChunkSquares), unit after unit; the
    // weight of every micro-batch of the global step, and this rank's
    // losses, posted by Step once its micro-batches have run.
    std::vector<double> chunk_sums;
    std::vector<double> micro_weights;
    std::vector<double> local_losses;
    bool stop_requested = false;  // this rank's, posted with its losses
    bool losses_posted = false;
    bool final_backward_started = false;
    int units_complete = 0;
    bool decided = false;
    StepStats stats;
    TraceRecorder::Clock::time_point start;
  };
  // What only the optimizer worker touches. Prepare builds it before the
  // worker starts and the worker's thread takes it (Init): while the worker
  // runs no other thread holds a reference, so none can reach it but through
  // the worker's arrivals. The thread hands it back as it ends (the
  // destructor frees it after the device is idle).
  struct WorkerParts {
    std::unique_ptr<Committer> committer;  // speculation, decision, rollback
    std::vector<char> group_done;          // per sub-group, this step
    std::vector<int> unit_groups_left;     // per unit, this step
    size_t prefetched_upto = 0;            // forward-order prefetch cursor
    size_t next_staging = 0;               // the weight staging slot the next update takes
    // Data parallelism: per unit, this micro-batch's parameters in.
    std::vector<uint64_t> unit_micro_params;
    // Data parallelism: (local params,) fp32, this rank's parts of the
    // summed gradient; with device collectives pinned instead
    // (reduced_landing: a D2H target).
    HostPages reduced;
    // Gradients on the drives with data parallelism (host collectives): the
    // units being gathered for their reduce-scatter (a few in flight, never
    // the model), and this rank's part of one unit's running sum.
    struct UnitGather {
      int unit = -1;
      HostPages buffer;  // (max_unit_params_,) transfer dtype
    };
    std::vector<UnitGather> unit_gathers;
    HostPages part_sum;  // (largest part,) fp32
    PinnedBuffer reduced_landing;
    // Device collectives: the sum over ranks of this rank's parts on the
    // device, fp32. Several micro-batches per rank: (local params,), the
    // step's running sum; one: (a bucket,), one piece's part at a time.
    DeviceBuffer device_reduced;
    // Device collectives: the worker's own D2H stream for this rank's part
    // of the summed gradient (d2h_ carries the compute thread's arrivals,
    // each behind its bucket's event: waiting for d2h_ would wait for backward).
    std::unique_ptr<Stream> part_d2h;
    // This rank's parts of the summed gradient, on the host.
    float* Reduced() {
      return reduced_landing.data() != nullptr ? reduced_landing.as<float>() : reduced.as<float>();
    }
  };

  OffloadEngine(Device& device, Trainable& model, const EngineOptions& options);
  Status Init();
  // After a micro-batch: the model released every unit's weights it took.
  Status CheckWeightsReleased() const;
  // Where sub-group `sg` of a resident unit lives in weights_.
  void* DeviceWeights(const SubGroup& sg) {
    return static_cast<char*>(weights_.data()) +
           (static_cast<uint64_t>(resident_offset_[sg.unit]) + sg.unit_offset) * wbytes();
  }
  // Returns `status`; when it is an error, first waits for the compute
  // stream, so that no enqueued work outlives the micro-batch it reads.
  Status DrainOnError(Status status);
  StateTier& TierOf(int g) { return *group_tier_[g]; }
  size_t wbytes() const { return DTypeSize(options_.weights_dtype); }
  // Bytes per parameter of the gradients crossing PCIe.
  size_t tbytes() const { return DTypeSize(transfer_dtype_); }
  // What the gradient spill's slots and files hold: the transfer dtype when
  // each step is one micro-batch, else the fp32 sum.
  DType GradSpillDType() const {
    const bool summed_in_fp32 = options_.micro_batches_per_step != 1 ||
                                (options_.comm != nullptr && options_.comm->world_size() > 1);
    return summed_in_fp32 ? DType::kF32 : transfer_dtype_;
  }
  StatusOr<char*> UnitGatherFor(WorkerParts& w, int u);
  Status ReduceScatterToSpill(WorkerParts& w, StepContext& ctx, int u, int micro);

  // Worker (optimizer_worker.cc).
  void WorkerLoop(WorkerParts& w);
  Status ProcessArrival(WorkerParts& w, const Arrival& a);
  // Host collectives or one process: piece `a` landed on the host (in the
  // landing buffer, or in its bucket's staging, gathered or accumulated
  // from there); frees the bucket. A whole unit's final accumulation also
  // yields its statistics in `stats`.
  Status TakeLandedPiece(WorkerParts& w, StepContext& ctx, const Arrival& a,
                         StatusOr<GradStatsResult>* stats);
  // First piece of a step's final backward: per-step bookkeeping reset, read-ahead started.
  Status BeginFinalBackward(WorkerParts& w);
  // Unit u's gradient is complete: its statistics, speculation queued; the decision at the last.
  Status UnitComplete(WorkerParts& w, StepContext& ctx, int u, bool whole_unit);
  Status Speculate(WorkerParts& w, StepContext& ctx, int g);
  Status Decide(WorkerParts& w, StepContext& ctx);
  // One process, after the decision: the sub-groups in forward order
  // (committed ones uploaded from the committer's buffer), each unit marked
  // ready when its last is up.
  Status UpdateInForwardOrder(WorkerParts& w, StepContext& ctx, int64_t adam_step, float grad_scale,
                              const std::vector<const void*>& committed);
  Status UpdateGroup(WorkerParts& w, StepContext& ctx, int g, int64_t adam_step, float grad_scale,
                     void* out, const StateBackup& backup);
  Status UploadGroup(StepContext& ctx, int g, const void* src);
  Status CreateGradSpill();
  void MarkUnitReady(int unit, int64_t step_id);
  // Every sub-group of `unit` was updated this step: a streamed unit's copy
  // is finished, then the unit is marked ready.
  Status UnitUpdated(int unit, int64_t step_id);
  // Streamed weights: whether unit `unit`'s update of the step before the
  // one being issued is in its copy (StreamedWeights::ReadyFn).
  StatusOr<bool> UnitCopyReady(int unit, bool wait);
  // Ends the ring's pass and adds its transfers to step `step_id`'s stats.
  Status EndWeightsPass(int64_t step_id);
  StepContext* FindStep(int64_t id);
  // Init up to the first collective (the initial all-gather of weights).
  Status Prepare();
  // Prepare's steps: the options alone; the streams; the working weights
  // (resident, or streamed: parameter offload); the gradient buckets, landing
  // and this rank's summed parts; the weights' staging, all-gather slots and
  // readiness events; the state tiers and which sub-groups each holds.
  Status ValidateOptions() const;
  Status CreateStreams();
  Status CreateWorkingWeights();
  Status AllocateGradients();
  Status AllocateUploads();
  Status CreateStateTiers();
  // Data parallelism (data_parallel.cc): whether this run calls collectives.
  bool data_parallel() const { return dp_->collective(); }
  // Gradients reduce-scattered and resident weights all-gathered on the
  // devices (EngineOptions::device_comm).
  bool device_collectives() const { return dp_->device_comm() != nullptr; }
  // Device collectives: piece `a` of a unit's gradient (in its bucket,
  // complete: its arrival rode the d2h stream behind the bucket's event)
  // is summed over the ranks on the devices into this rank's part of it,
  // continuing the step's running sum there; in this rank's last
  // micro-batch that part crosses to the host (Reduced). Frees the bucket.
  Status ReducePieceOnDevice(WorkerParts& w, StepContext& ctx, const Arrival& a);
  // A piece of unit u's gradient of micro-batch `micro` is in: once the
  // unit's pieces of that micro-batch all are, sum them over the ranks into
  // this rank's part (reduced_), continuing the step's running sum.
  Status CollectForReduceScatter(WorkerParts& w, StepContext& ctx, int u, uint64_t n, int micro);
  // The step's last reduce-scatter of unit u is done: its chunk sums.
  Status TakeNormChunks(WorkerParts& w, StepContext& ctx, int u);
  // The global norm's chunk sums and the step's losses from every rank:
  // fills ctx.unit_sum_squares / unit_non_finite and ctx.stats.loss.
  Status GatherNormAndLoss(StepContext& ctx);
  // After the decision: updates this rank's sub-groups unit by unit in
  // forward order, all-gathers each unit's new weights and uploads them (a
  // streamed unit's go into its copy, which the next fetch uploads).
  Status UpdateAndGatherUnits(WorkerParts& w, StepContext& ctx, int64_t adam_step, float grad_scale,
                              const std::vector<const void*>& committed);
  // Where unit u's new 16-bit weights are put together: a streamed unit's
  // copy (the host copy, or its NVMe write-back buffer), else the next
  // all-gather slot once its previous upload has left it.
  StatusOr<char*> UnitWeightsTarget(int u);
  // All-gathers unit u's weights in `target` (UnitWeightsTarget's), this
  // rank's part already there; uploads the whole unit, or for a streamed
  // unit makes it the copy the next fetch uploads; marks it ready for
  // `step_id` (< 0: at start-up).
  Status GatherAndUploadUnit(int u, int64_t step_id, char* target);
  // Device collectives, a resident unit: uploads this rank's part from the
  // all-gather slot `UnitWeightsTarget` gave, all-gathers the unit on the
  // devices in place, marks it ready.
  Status UploadPartAndGather(int u, int64_t step_id);
  Status PrefetchForward(WorkerParts& w, size_t from_index);
  // Reads ahead the sub-groups the next step needs first (backward order when
  // overlapped, forward order when synchronous), so the disk works across the
  // step boundary instead of idling until the first gradients arrive.
  Status PrefetchNextStep(bool wait_for_writes);

  Device& device_;
  Trainable& model_;
  EngineOptions options_;
  std::vector<UnitInfo> units_;
  SubGroupLayout layout_;
  // (num_units + 1,) prefix sums of the whole units: where each unit's
  // gradients sit in the accumulator / landing buffer, which hold the whole
  // model on every rank.
  std::vector<uint64_t> grad_offsets_;
  uint64_t max_unit_params_ = 0;  // of the whole units

  // How the ranks share the step (a world of one: one process).
  std::unique_ptr<DataParallelStrategy> dp_;
  struct GatherSlot {
    PinnedBuffer buffer;  // (max_unit_params_,) weights dtype: a whole unit
    std::unique_ptr<Event> uploaded;
  };
  std::vector<GatherSlot> gather_;
  size_t next_gather_ = 0;
  TraceRecorder own_trace_;
  TraceRecorder* trace_;
  DType transfer_dtype_ = DType::kF32;  // the gradients' dtype across PCIe

  std::unique_ptr<Stream> compute_, d2h_, h2d_;
  // Spans of the three streams for the trace, timed by events.
  std::unique_ptr<DeviceSpans> device_spans_;
  DeviceBuffer weights_;  // the resident units' weights, packed, weights dtype
  // Per unit: elements into weights_, or -1 for a streamed unit.
  std::vector<int64_t> resident_offset_;
  std::unique_ptr<StreamedWeights> streamed_;  // null: every unit resident
  std::vector<char> taken_;                    // per unit: Weights given, ReleaseWeights not yet
  // The gradient buckets and the host landing (built by Prepare).
  std::unique_ptr<GradInbox> inbox_;
  std::vector<StagingSlot> staging_;
  std::vector<std::unique_ptr<Event>> unit_ready_;  // per unit
  std::unique_ptr<StateTier> host_tier_, nvme_tier_;
  // Gradients on the drives (grad_offload kNvme), in nvme_tier_'s store:
  // declared after it, so it goes first.
  std::unique_ptr<GradSpill> grad_spill_;
  std::vector<StateTier*> group_tier_;
  std::vector<int> backward_order_;   // sub-groups in the order backward delivers them
  std::vector<size_t> backward_pos_;  // sub-group -> index in backward_order_

  // Main-thread state of the step being issued.
  int64_t issued_step_ = 0;
  int current_micro_ = 0;
  bool landing_ = false;  // the step being issued has one micro-batch (StepContext::landed)
  std::vector<int64_t> weights_waited_;  // per unit: step id whose wait was enqueued
  // The pieces of the micro-batch being issued, checked against the contract.
  std::unique_ptr<PieceLedger> ledger_;
  LossScaler scaler_;  // worker-owned between decisions

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Arrival> queue_;
  std::deque<StepContext> steps_;
  std::vector<int64_t> unit_ready_step_;  // per unit: step whose update is enqueued
  int64_t optimizer_step_ = 0;
  int64_t finished_step_ = 0;  // last step fully uploaded
  bool stopping_ = false;      // the destructor runs: waits for a step's losses end
  std::atomic<bool> stop_requested_{false};
  Status worker_error_;
  // Built by Prepare, taken by the worker's thread, back after its join.
  std::unique_ptr<WorkerParts> worker_parts_;
  std::thread worker_;
};

}  // namespace tierflow

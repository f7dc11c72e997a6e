// The committer: speculation during backward, the step's decision, and
// commit or rollback of what was speculated.
//
// Between gradient arrivals the optimizer worker updates sub-groups as if the
// step will neither clip nor overflow (Speculate*). When the whole gradient is
// in, DecideClip says whether that held; Resolve then commits the speculative
// updates (their new weights wait in the committer's pinned buffer) or rolls
// them back: a host-tier sub-group from the backup its update wrote, an NVMe
// one by not making its second copy current. The caller redoes rolled-back
// sub-groups with the rest.
//
// Thread ownership: the optimizer worker alone holds a Committer (the engine
// builds it before the worker starts and moves it into the worker's parts).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "common/host_memory.h"
#include "common/trace.h"
#include "engine/state_tier.h"
#include "engine/sub_groups.h"
#include "tierflow/device.h"

namespace tierflow {

// The step's clip and overflow decision from each unit's sum of squares
// (summed in unit order, so every pipeline gets the same bits).
struct ClipDecision {
  bool non_finite = false;
  double grad_norm = 0;  // of the unscaled gradient; NaN when non-finite
  float coef = 1.0f;     // the clip coefficient (1: no clipping)
  // Whether updates made assuming no clipping and no overflow hold.
  bool speculation_valid() const { return !non_finite && coef == 1.0f; }
};
// `clip_grad_norm` <= 0: no clipping.
ClipDecision DecideClip(const std::vector<double>& unit_sum_squares,
                        const std::vector<char>& unit_non_finite, float loss_scale,
                        double clip_grad_norm);

// Where a host-tier sub-group's state goes before a speculative update
// (null: nowhere, the update is final or its tier speculates out of place).
struct StateBackup {
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

class Committer {
 public:
  struct Config {
    // The speculation budget in parameters (0: no speculation; no buffers).
    uint64_t budget_params = 0;
    DType weights_dtype = DType::kBF16;
    // The step after one whose speculation failed (clipped) does not speculate.
    bool pause_after_clip = true;
  };
  // Allocates the speculative weights' pinned buffer and, for the sub-groups
  // of tiers that cannot speculate out of place, the backups (resident
  // huge pages). `layout` and the tiers must outlive the committer.
  static StatusOr<std::unique_ptr<Committer>> Create(Device& device, const SubGroupLayout& layout,
                                                     std::vector<StateTier*> group_tier,
                                                     const Config& config, TraceRecorder* trace);

  // The final backward of a step begins: nothing is speculated, nothing queued.
  void BeginStep();
  // Whether this step speculates at all (the last decided one did not clip).
  bool paused() const { return paused_; }
  // Queues unit `unit`'s sub-groups (in order) of step `step_id` within the
  // budget left.
  void QueueUnit(int64_t step_id, int unit);
  int64_t pending_step() const { return pending_step_; }
  bool HasPending() const { return !pending_.empty(); }
  int PopPending();
  // Drops what is queued (the step will be skipped, or the decision is due).
  void ClearPending() { pending_.clear(); }

  // Where speculative update of sub-group g writes its new weights and its
  // backup. The first of a step waits for the last commit's uploads to leave
  // the buffer.
  struct Target {
    void* out = nullptr;
    StateBackup backup;
  };
  StatusOr<Target> BeginSpeculation(int g);
  // g's speculative update is done (an out-of-place tier stores it beside
  // the current state).
  Status EndSpeculation(int g);
  int speculated() const { return static_cast<int>(speculations_.size()); }

  struct Outcome {
    int speculated = 0;
    bool paused = false;       // this step did not speculate (StepStats::speculation_paused)
    bool rolled_back = false;  // speculation ran and did not hold
    bool committed = false;    // speculation ran and held
  };
  // Commits (`decision` holds) or rolls back every speculated sub-group.
  // Committed ones get their new weights in (*committed)[g] (sub-groups
  // indexed; null for the others) and (*group_done)[g] = 1.
  StatusOr<Outcome> Resolve(const ClipDecision& decision, std::vector<const void*>* committed,
                            std::vector<char>* group_done);
  // Records on `h2d` that the committed weights have been read (uploads
  // enqueued before): the next step's first speculation waits for it.
  Status RecordUploaded(Stream& h2d);

 private:
  struct Speculation {
    int group;
    uint64_t backup_offset;  // into each array of backup_ (host tier)
    uint64_t out_offset;     // into out_ (weights dtype elements)
  };
  Committer(const SubGroupLayout& layout, std::vector<StateTier*> group_tier, const Config& config,
            TraceRecorder* trace)
      : layout_(layout), group_tier_(std::move(group_tier)), config_(config), trace_(trace) {}
  Status RollBack(const Speculation& s);

  const SubGroupLayout& layout_;
  std::vector<StateTier*> group_tier_;
  Config config_;
  TraceRecorder* trace_;
  // Backups of the speculated host-tier sub-groups: master, exp_avg,
  // exp_avg_sq, each backup_capacity_ long, written by the speculative
  // update itself (OptimSpans' backup).
  HostPages backup_;
  uint64_t backup_capacity_ = 0;
  PinnedBuffer out_;  // speculative updated weights, weights dtype
  std::unique_ptr<Event> uploaded_;
  std::vector<Speculation> speculations_;
  uint64_t used_params_ = 0, backup_used_params_ = 0, queued_params_ = 0;
  std::deque<int> pending_;   // sub-groups waiting to be speculated
  int64_t pending_step_ = 0;  // the step they belong to
  bool paused_ = false;
};

}  // namespace tierflow

// The committer: speculation buffers, the clip decision, commit and rollback.
#include "engine/committer.h"

#include <algorithm>
#include <cmath>

#include "offload/aligned_buffer.h"
#include "optim/parallel_copy.h"

namespace tierflow {
namespace {
// Speculation offsets (into the backups' arrays and the weights' buffer) are
// multiples of this many elements, so each speculative update's backup and
// copy out start vector-aligned and take non-temporal stores
// (optim/step_loop.h); each sub-group may waste up to this many elements less one.
constexpr uint64_t kSpecAlignElems = 16;
uint64_t SpecAligned(uint64_t n) { return offload::RoundUp(n, kSpecAlignElems); }
}  // namespace

ClipDecision DecideClip(const std::vector<double>& unit_sum_squares,
                        const std::vector<char>& unit_non_finite, float loss_scale,
                        double clip_grad_norm) {
  double sum_squares = 0;
  bool non_finite = false;
  for (size_t u = 0; u < unit_sum_squares.size(); ++u) {  // unit order: the same sum everywhere
    sum_squares += unit_sum_squares[u];
    non_finite |= unit_non_finite[u] != 0;
  }
  ClipDecision d;
  d.non_finite = non_finite;
  const double grad_norm = std::sqrt(sum_squares) / loss_scale;
  if (!non_finite && clip_grad_norm > 0 && grad_norm > clip_grad_norm) {
    d.coef = static_cast<float>(clip_grad_norm / (grad_norm + 1e-6));
  }
  d.grad_norm = non_finite ? NAN : grad_norm;
  return d;
}

StatusOr<std::unique_ptr<Committer>> Committer::Create(Device& device, const SubGroupLayout& layout,
                                                       std::vector<StateTier*> group_tier,
                                                       const Config& config, TraceRecorder* trace) {
  if (group_tier.size() != layout.groups.size()) {
    return InvalidArgumentError("Committer: " + std::to_string(group_tier.size()) +
                                " sub-group tiers for " + std::to_string(layout.groups.size()) +
                                " sub-groups");
  }
  std::unique_ptr<Committer> c(new Committer(layout, std::move(group_tier), config, trace));
  if (config.budget_params == 0) return c;
  const uint64_t budget = std::min<uint64_t>(config.budget_params, layout.total_params);
  c->config_.budget_params = budget;
  uint64_t in_place_params = 0;
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    if (!c->group_tier_[g]->SpeculatesOutOfPlace()) in_place_params += layout.groups[g].num_params;
  }
  // Room for every speculated sub-group's offset to be rounded up.
  const uint64_t padding = layout.groups.size() * kSpecAlignElems;
  c->backup_capacity_ =
      in_place_params == 0 ? 0 : SpecAligned(std::min(budget, in_place_params)) + padding;
  // Resident from the start: a first write into fresh huge pages costs the
  // kernel's zeroing (and compaction) mid-step, 100 ms per sub-group here.
  TF_ASSIGN_OR_RETURN(
      c->backup_, HostPages::AllocateResident(3 * c->backup_capacity_ * 4, "speculation backups"));
  TF_ASSIGN_OR_RETURN(c->out_,
                      device.AllocatePinned((budget + padding) * DTypeSize(config.weights_dtype),
                                            "speculative weight staging"));
  TF_ASSIGN_OR_RETURN(c->uploaded_, device.CreateEvent(false));
  return c;
}

void Committer::BeginStep() {
  speculations_.clear();
  used_params_ = 0;
  backup_used_params_ = 0;
  queued_params_ = 0;
}

void Committer::QueueUnit(int64_t step_id, int unit) {
  pending_step_ = step_id;
  for (int g : layout_.by_unit[unit]) {
    const uint64_t gn = layout_.groups[g].num_params;
    if (queued_params_ + gn > config_.budget_params) break;
    queued_params_ += gn;
    pending_.push_back(g);
  }
}

int Committer::PopPending() {
  const int g = pending_.front();
  pending_.pop_front();
  return g;
}

StatusOr<Committer::Target> Committer::BeginSpeculation(int g) {
  if (speculations_.empty()) {
    // The previous commit's uploads read out_: wait before overwriting it.
    TF_RETURN_IF_ERROR(uploaded_->HostWait());
  }
  Target t;
  if (!group_tier_[g]->SpeculatesOutOfPlace()) {
    // The update copies the old state here in its own pass.
    const uint64_t cap = backup_capacity_;
    float* base = backup_.as<float>() + backup_used_params_;
    t.backup = StateBackup{base, base + cap, base + 2 * cap};
  }
  t.out = out_.as<char>() + used_params_ * DTypeSize(config_.weights_dtype);
  return t;
}

Status Committer::EndSpeculation(int g) {
  StateTier& tier = *group_tier_[g];
  if (tier.SpeculatesOutOfPlace()) TF_RETURN_IF_ERROR(tier.ReleaseSpeculative(g));
  speculations_.push_back(Speculation{g, backup_used_params_, used_params_});
  const uint64_t padded = SpecAligned(layout_.groups[g].num_params);
  used_params_ += padded;
  if (!tier.SpeculatesOutOfPlace()) backup_used_params_ += padded;
  return Status::Ok();
}

Status Committer::RollBack(const Speculation& s) {
  const SubGroup& sg = layout_.groups[s.group];
  StateTier& tier = *group_tier_[s.group];
  if (tier.SpeculatesOutOfPlace()) return tier.Abort(s.group);
  ScopedSpan span(trace_, "optimizer", "rollback " + sg.name);
  TF_ASSIGN_OR_RETURN(StateView view, tier.Acquire(s.group));
  const size_t n = sg.num_params, cap = backup_capacity_;
  const float* backup = backup_.as<float>();
  ParallelCopy(view.master, backup + s.backup_offset, n * 4);
  ParallelCopy(view.exp_avg, backup + cap + s.backup_offset, n * 4);
  ParallelCopy(view.exp_avg_sq, backup + 2 * cap + s.backup_offset, n * 4);
  return tier.Release(s.group, /*modified=*/false);
}

StatusOr<Committer::Outcome> Committer::Resolve(const ClipDecision& decision,
                                                std::vector<const void*>* committed,
                                                std::vector<char>* group_done) {
  const bool valid = decision.speculation_valid();
  Outcome o;
  o.speculated = speculated();
  o.paused = paused_;
  o.rolled_back = !speculations_.empty() && !valid;
  o.committed = !speculations_.empty() && valid;
  paused_ = config_.pause_after_clip && !valid;
  committed->assign(layout_.groups.size(), nullptr);
  const size_t wbytes = DTypeSize(config_.weights_dtype);
  for (const Speculation& s : speculations_) {
    if (!valid) {
      TF_RETURN_IF_ERROR(RollBack(s));
      continue;
    }
    StateTier& tier = *group_tier_[s.group];
    if (tier.SpeculatesOutOfPlace()) TF_RETURN_IF_ERROR(tier.Commit(s.group));
    (*committed)[s.group] = out_.as<char>() + s.out_offset * wbytes;
    (*group_done)[s.group] = 1;
  }
  speculations_.clear();
  return o;
}

Status Committer::RecordUploaded(Stream& h2d) { return h2d.Record(*uploaded_); }

}  // namespace tierflow

// The step loop, the checkpoints it writes, and the end of the run.
#include "train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <vector>

#include "comm/agree.h"
#include "common/cancel.h"
#include "engine/master_weights.h"
#include "io/output_path.h"
#include "io/trace_file.h"
#include "train/final_model.h"
#include "train/run_outputs.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

MicroBatch ToMicroBatch(const TokenBatch& b) {
  MicroBatch mb;
  mb.inputs = b.inputs.data();
  mb.targets = b.targets.data();
  mb.batch = b.batch;
  mb.seq_len = b.seq_len;
  mb.positions = b.positions.empty() ? nullptr : b.positions.data();
  // The step's loss is then the mean over every trained target of its
  // micro-batches (instruction data masks prompts, so counts differ).
  mb.loss_tokens = std::count_if(b.targets.begin(), b.targets.end(),
                                 [](int32_t t) { return t != kIgnoreTarget; });
  return mb;
}

// What the final model's save did with what was in OUT/model.
void ReportFinalModel(const FinalModelReport& r, const std::string& model_dir,
                      TrainReporter& reporter) {
  auto names = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& n : v) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!r.restored_from.empty()) {
    reporter.OnNote("put the previous model back in " + model_dir + " from " + r.restored_from +
                    ", where an interrupted save had left it");
  }
  if (!r.kept.empty()) {
    reporter.OnNote("kept in " + model_dir +
                    " what tierflow does not write there: " + names(r.kept));
  }
  if (!r.dropped.empty()) {
    reporter.OnNote("dropped from " + model_dir + " the previous model's " + names(r.dropped) +
                    " (this model has none)");
  }
}

// Why a run whose every step was skipped ends with an error, and what to try.
std::string AllStepsSkipped(const TrainConfig& config, int64_t start_step, int64_t step,
                            double last_loss, const std::string& out_dir) {
  const int64_t n = step - start_step;
  std::string msg = "every step of this run was skipped (" + std::to_string(n) + " of " +
                    std::to_string(n) + ", steps " + std::to_string(start_step + 1) + ".." +
                    std::to_string(step) +
                    "): the gradients were not finite (NaN or infinite) at each, so no weight "
                    "changed; the last loss was " +
                    std::to_string(last_loss) + ". ";
  if (config.dtype == DType::kF16 && config.loss_scale == 0.0f) {
    msg +=
        "With fp16's dynamic loss scale the first steps are skipped while the scale comes down "
        "from 2^initial_scale_power: run more steps or lower initial_scale_power; if the loss "
        "itself is NaN, ";
  } else {
    msg += "If the loss is NaN, ";
  }
  msg +=
      "check the model's weights (a damaged checkpoint holds NaN or Inf) and the data; else lower "
      "the learning rate or use bf16/fp32. Nothing was saved as the final model (" +
      (fs::path(out_dir) / "model").string() + " is left as it was)";
  return msg;
}

class TrainLoop {
 public:
  TrainLoop(TrainLoopParts& p, int64_t start_step, WritableFile* metrics)
      : p_(p),
        c_(p.config),
        metrics_(metrics),
        ranks_(p.comm != nullptr ? p.comm->world_size() : 1),
        lead_(p.comm == nullptr || p.comm->rank() == 0),
        start_step_(start_step),
        step_(start_step),
        last_checkpoint_(start_step),
        batches_(static_cast<size_t>(c_.grad_accum) * ranks_) {
    // --trace without --trace-steps traces step 2 (step 1 includes warm-up effects).
    trace_steps_ = c_.trace_steps;
    if (!c_.trace_path.empty() && trace_steps_.empty()) {
      trace_steps_.push_back(std::min<int64_t>(2, c_.steps));
    }
  }

  StatusOr<TrainResult> Run() {
    loop_start_ = last_ = Clock::now();
    while (step_ < c_.steps) {
      TF_ASSIGN_OR_RETURN(const bool stop_now, Step());
      if (stop_now) {
        result_.stopped = true;
        break;
      }
    }
    TF_RETURN_IF_ERROR(p_.engine.Finish().status());
    result_.steps_skipped = steps_skipped_;
    // Every step skipped: no weight moved, so the model is the one the run
    // started from. That is a failure, not a result: no final checkpoint (it
    // would only push older ones out of retention) and no OUT/model (an
    // earlier run's good one is kept), and the run ends with an error.
    if (!result_.stopped && step_ > start_step_ && steps_skipped_ == step_ - start_step_) {
      return FailedPreconditionError(
          AllStepsSkipped(c_, start_step_, step_, last_loss_, p_.out_dir));
    }
    if (!result_.stopped) TF_RETURN_IF_ERROR(FinishRun());
    result_.steps_done = step_;
    result_.last_loss = last_loss_;
    return result_;
  }

 private:
  Status Agree(const Status& s) {
    return p_.comm != nullptr ? comm::AgreeOnStatus(*p_.comm, s) : s;
  }

  // One step; true when a stop was asked for (and checkpointed).
  StatusOr<bool> Step() {
    const int64_t next = step_ + 1;
    const bool traced =
        !c_.trace_path.empty() &&
        std::find(trace_steps_.begin(), trace_steps_.end(), next) != trace_steps_.end();
    p_.trace.SetEnabled(traced);
    const float lr = ScheduledLr(c_, next);
    p_.engine.SetLearningRate(lr);
    std::vector<MicroBatch> micro(batches_.size());
    for (size_t k = 0; k < batches_.size(); ++k) {
      p_.loader.Next(&batches_[k]);
      micro[k] = ToMicroBatch(batches_[k]);
    }
    // A stop asked for here travels with the step's own collectives, so
    // every rank stops after the same step.
    p_.engine.SetStopRequested(LocalStop());
    TF_ASSIGN_OR_RETURN(StepStats stats, p_.engine.Step(micro));
    step_ = next;
    last_loss_ = stats.loss;
    if (stats.skipped) ++steps_skipped_;
    if (step_ == start_step_ + 1) result_.first_loss = stats.loss;
    nlohmann::json line = Report(stats, lr);
    if (traced) {
      // The trace holds the step alone (not the evaluation below).
      TF_RETURN_IF_ERROR(p_.engine.Finish().status());
      p_.trace.SetEnabled(false);
    }
    if (c_.eval_every > 0 && step_ % c_.eval_every == 0) {
      TF_ASSIGN_OR_RETURN(double eval_loss, Evaluate());
      if (eval_loss >= 0) {
        line["eval_loss"] = eval_loss;
        result_.eval_loss = eval_loss;
        p_.reporter.OnEval(step_, eval_loss);
      }
    }
    if (lead_) {
      const std::string text = line.dump() + "\n";
      TF_RETURN_IF_ERROR(metrics_->Append(text.data(), text.size()).WithContext("metrics file"));
    }
    // After the step's metrics line: a trace that cannot be written (its
    // path was checked at start-up) does not lose the step's record.
    if (traced) {
      // Every rank's own trace; rank r > 0 writes PATH.rank<r>.
      TF_RETURN_IF_ERROR(WriteTraceFile(
          p_.trace, TracePathOfRank(c_.trace_path, p_.comm != nullptr ? p_.comm->rank() : 0)));
    }
    // Several ranks: the step's collectives carried each rank's wish.
    const bool stop_now = p_.comm != nullptr ? stats.stop_requested : LocalStop();
    if ((c_.checkpoint_every > 0 && step_ % c_.checkpoint_every == 0) || stop_now) {
      // A stop request during a save lets it finish (the save is what the
      // stop asks for); only a second request interrupts it.
      CancelShield shield;
      TF_RETURN_IF_ERROR(Checkpoint(stats.loss));
    }
    return stop_now;
  }

  bool LocalStop() const { return (p_.stop != nullptr && p_.stop->load()) || CancelRequested(); }

  // The reporter's line and the step's metrics record.
  nlohmann::json Report(const StepStats& stats, float lr) {
    const auto now = Clock::now();
    const double step_seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    StepReport report;
    report.step = step_;
    report.total_steps = c_.steps;
    report.stats = stats;
    report.lr = lr;
    report.tokens_per_second =
        static_cast<double>(p_.tokens_per_step) / std::max(step_seconds, 1e-9);
    report.elapsed_seconds = std::chrono::duration<double>(now - loop_start_).count();
    report.eta_seconds = report.elapsed_seconds / static_cast<double>(step_ - start_step_) *
                         static_cast<double>(c_.steps - step_);
    report.device_bytes = p_.device.DeviceMemory().in_use_bytes;
    report.pinned_bytes = p_.device.PinnedMemory().in_use_bytes;
    report.host_state_bytes = p_.engine.HostStateBytes();
    report.nvme_bytes = p_.engine.NvmeFileBytes();
    p_.reporter.OnStep(report);
    nlohmann::json line = {
        {"step", step_},
        {"loss", stats.loss},
        {"lr", lr},
        {"grad_norm", std::isfinite(stats.grad_norm) ? nlohmann::json(stats.grad_norm)
                                                     : nlohmann::json(nullptr)},
        {"clip_coef", stats.clip_coef},
        {"loss_scale", stats.loss_scale},
        {"skipped", stats.skipped},
        {"rolled_back", stats.rolled_back},
        {"speculation_paused", stats.speculation_paused},
        {"tokens", p_.tokens_per_step},
        {"tokens_per_second", report.tokens_per_second},
        {"elapsed_seconds", report.elapsed_seconds},
        {"device_bytes", report.device_bytes},
        {"device_peak_bytes", p_.device.DeviceMemory().peak_bytes},
        {"pinned_bytes", report.pinned_bytes}};
    // The first record of each run says which NVMe settings ran and why,
    // and what the plan counted.
    if (step_ == start_step_ + 1) {
      for (auto it = p_.first_record.begin(); it != p_.first_record.end(); ++it) {
        line[it.key()] = it.value();
      }
    }
    return line;
  }

  // What rank 0 writes from the whole state (a checkpoint, the model): the
  // ranks first agree that every engine has finished (none serves from a
  // failed one), then the others serve their parts while the lead writes,
  // and all agree on how it went.
  Status LeadWrites(const std::function<Status()>& write) {
    TF_RETURN_IF_ERROR(Agree(p_.engine.Finish().status()));
    if (p_.comm == nullptr) return write();
    Status written;
    if (lead_) {
      written = write();
      const Status ended = StateRangeReader::EndServing(p_.engine);
      if (written.ok()) written = ended;
    } else {
      written = StateRangeReader(p_.engine).Serve();
    }
    return Agree(written);
  }

  Status Checkpoint(double loss) {
    TF_RETURN_IF_ERROR(p_.engine.Finish().status());
    CheckpointState state;
    state.step = step_;
    state.optimizer_step = p_.engine.optimizer_step();
    state.scaler = p_.engine.loss_scaler_state();
    state.data_state = p_.loader.SaveState();
    state.loss = loss;
    state.model = c_.model;
    state.world_size = ranks_;
    state.sequences_per_step = static_cast<int64_t>(c_.micro_batch) * c_.grad_accum * ranks_;
    RetentionReport retention;
    const std::string dir = (fs::path(p_.out_dir) / "checkpoints").string();
    TF_RETURN_IF_ERROR(LeadWrites([&]() -> Status {
      // Checked at start-up, and again here: a link made since is refused too.
      TF_RETURN_IF_ERROR(
          CheckNoLinksUnder(p_.out_dir, dir).WithContext("the checkpoints' directory"));
      return SaveTrainingCheckpoint(p_.out_dir, p_.engine, p_.layout, state, 2, &retention,
                                    &p_.source_files);
    }));
    for (const std::string& note : retention.notes) p_.reporter.OnNote(note);
    for (const CheckpointInfo& kept : retention.kept_unverified) {
      p_.reporter.OnNote("kept checkpoint " + kept.path + ", which cannot be verified now (" +
                         kept.problem + "); fix that and it verifies again, or remove it yourself");
    }
    last_checkpoint_ = step_;
    p_.reporter.OnCheckpoint(step_, dir);
    return Status::Ok();
  }

  // The mean loss over every evaluated target (batches weighted by their
  // counted targets, as a step's micro-batches are); -1 without eval data.
  StatusOr<double> Evaluate() {
    TF_RETURN_IF_ERROR(p_.engine.Finish().status());
    const int64_t n = std::min<int64_t>(c_.eval_batches, p_.loader.num_eval_batches());
    if (n <= 0) return -1.0;
    double sum = 0;
    int64_t counted = 0;
    TokenBatch b;
    for (int64_t i = 0; i < n; ++i) {
      p_.loader.EvalBatch(i, &b);
      const MicroBatch mb = ToMicroBatch(b);
      TF_ASSIGN_OR_RETURN(float loss, p_.engine.EvaluateLoss(mb));
      sum += static_cast<double>(loss) * static_cast<double>(mb.loss_tokens);
      counted += mb.loss_tokens;
    }
    return counted > 0 ? sum / static_cast<double>(counted) : 0.0;
  }

  // The final checkpoint, evaluation and model, as final_save asks.
  Status FinishRun() {
    CancelShield shield;  // the final checkpoint and model are saved whole, or not at all
    if (last_checkpoint_ != step_ && c_.final_save == FinalSave::kAll) {
      TF_RETURN_IF_ERROR(Checkpoint(last_loss_));
    }
    if (c_.eval_every > 0 && step_ % c_.eval_every != 0) {
      TF_ASSIGN_OR_RETURN(double eval_loss, Evaluate());
      if (eval_loss >= 0) {
        result_.eval_loss = eval_loss;
        p_.reporter.OnEval(step_, eval_loss);
      }
    }
    if (c_.final_save == FinalSave::kNone) return Status::Ok();
    FinalModelReport saved;
    TF_RETURN_IF_ERROR(LeadWrites([&] {
      return SaveFinalModel(*p_.out_lock, p_.engine, p_.layout, c_.dtype, p_.source_files,
                            p_.file_system, &saved);
    }));
    const std::string model_dir = (fs::path(p_.out_dir) / "model").string();
    ReportFinalModel(saved, model_dir, p_.reporter);
    result_.final_model_dir = model_dir;
    return Status::Ok();
  }

  TrainLoopParts& p_;
  const TrainConfig& c_;
  WritableFile* metrics_;
  const int ranks_;
  const bool lead_;
  const int64_t start_step_;
  int64_t step_;
  int64_t last_checkpoint_;
  // The global step's micro-batches, every rank's (the engine runs its own).
  std::vector<TokenBatch> batches_;
  std::vector<int64_t> trace_steps_;
  Clock::time_point loop_start_, last_;
  double last_loss_ = 0;
  int64_t steps_skipped_ = 0;  // this run's steps whose non-finite gradients changed nothing
  TrainResult result_;
};

}  // namespace

StatusOr<TrainResult> RunTrainLoop(TrainLoopParts& parts, int64_t start_step,
                                   WritableFile* metrics) {
  return TrainLoop(parts, start_step, metrics).Run();
}

}  // namespace tierflow

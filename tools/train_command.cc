// `tierflow train`: the fine-tuning job. Flags and/or a JSON config (with
// DeepSpeed's keys); progress as a bar on a terminal, plain lines otherwise;
// SIGINT/SIGTERM save a checkpoint and exit cleanly.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "comm/launch_env.h"
#include "common/cancel.h"
#include "common/cpu_isa.h"
#include "common/units.h"
#include "plan/plan_report.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/train_ranks.h"
#include "train/train_options.h"
#include "train/trainer.h"

namespace tierflow::cli {
namespace {

std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int s = static_cast<int>(std::lround(seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%dh%02dm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%dm%02ds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%ds", s);
  return buf;
}

// Progress on stderr: a redrawn bar on a terminal, a line every N steps otherwise.
class ConsoleReporter : public TrainReporter {
 public:
  explicit ConsoleReporter(int64_t log_every) : log_every_(log_every), tty_(::isatty(2) != 0) {}

  void OnStart(const RunInfo& i) override {
    std::fprintf(stderr,
                 "tierflow train: %s\n  device: %s\n  data: %lld train tokens, %lld eval tokens\n"
                 "  optimizer state: %s%s%s (%s)\n"
                 "  speculation: up to %s params per step (%s); gradients cross PCIe as %s\n"
                 "  output: %s\n",
                 i.model.c_str(), i.device.c_str(), static_cast<long long>(i.train_tokens),
                 static_cast<long long>(i.eval_tokens), i.offload.c_str(),
                 i.nvme_dir.empty() ? "" : " at ", i.nvme_dir.c_str(), i.offload_from.c_str(),
                 FormatParamCount(i.speculation_params).c_str(), i.speculation_from.c_str(),
                 std::string(DTypeName(i.grad_transfer_dtype)).c_str(), i.out_dir.c_str());
    // tools/main.cc has checked the level choice at start-up.
    std::fprintf(stderr, "  host loops: %s\n", std::string(IsaName(*SelectedIsa())).c_str());
    std::fprintf(stderr, "  planner's rates: %s\n", i.rates.c_str());
    if (i.world_size > 1) {
      std::fprintf(stderr,
                   "  data parallel: %d ranks, each with 1/%d of the optimizer state; %lld tokens "
                   "per step across them\n",
                   i.world_size, i.world_size, static_cast<long long>(i.tokens_per_step));
    }
    if (!i.resumed_from.empty()) {
      std::fprintf(stderr, "  resumed from %s (step %lld)\n", i.resumed_from.c_str(),
                   static_cast<long long>(i.start_step));
    }
  }
  void OnNote(const std::string& m) override {
    ClearBar();
    std::fprintf(stderr, "tierflow train: %s\n", m.c_str());
  }
  void OnStep(const StepReport& r) override {
    const StepStats& s = r.stats;
    char mem[160];
    std::snprintf(mem, sizeof(mem), "dev %s | pinned %s | host %s | nvme %s",
                  FormatBytes(r.device_bytes).c_str(), FormatBytes(r.pinned_bytes).c_str(),
                  FormatBytes(r.host_state_bytes).c_str(), FormatBytes(r.nvme_bytes).c_str());
    if (tty_) {
      const int width = 24;
      const int filled = static_cast<int>(width * r.step / std::max<int64_t>(r.total_steps, 1));
      std::string bar(filled, '=');
      bar.resize(width, ' ');
      std::fprintf(stderr, "\r\033[K[%s] %lld/%lld loss %.4f%s | %.0f tok/s | ETA %s | %s",
                   bar.c_str(), static_cast<long long>(r.step),
                   static_cast<long long>(r.total_steps), s.loss, s.skipped ? " (skipped)" : "",
                   r.tokens_per_second, Duration(r.eta_seconds).c_str(), mem);
      bar_shown_ = true;
      if (r.step == r.total_steps) ClearBar();
    } else if (r.step % log_every_ == 0 || r.step == r.total_steps || s.skipped) {
      std::fprintf(
          stderr,
          "step %lld/%lld loss %.4f lr %.3g grad_norm %.3f%s%s | %.0f tok/s | ETA %s | %s\n",
          static_cast<long long>(r.step), static_cast<long long>(r.total_steps), s.loss, r.lr,
          s.grad_norm, s.clip_coef < 1 ? " (clipped)" : "",
          s.skipped ? " (skipped: non-finite gradients)" : "", r.tokens_per_second,
          Duration(r.eta_seconds).c_str(), mem);
    }
  }
  void OnEval(int64_t step, double loss) override {
    ClearBar();
    std::fprintf(stderr, "step %lld eval loss %.4f\n", static_cast<long long>(step), loss);
  }
  void OnCheckpoint(int64_t step, const std::string& path) override {
    ClearBar();
    std::fprintf(stderr, "step %lld checkpoint saved under %s\n", static_cast<long long>(step),
                 path.c_str());
  }

 private:
  void ClearBar() {
    if (bar_shown_) std::fprintf(stderr, "\n");
    bar_shown_ = false;
  }
  int64_t log_every_;
  bool tty_;
  bool bar_shown_ = false;
};

struct TrainFlags {
  TrainConfig cli;  // numbers, switches and lists, as CLI11 reads them
  // The text of every other flag (named values, counts, sizes), by flag;
  // the options table's typed parser reads it (train/train_options.h).
  std::map<std::string, std::string> texts;
  std::string config_file;
  int nproc_per_node = 0;    // 0: as launched
  double rank_timeout = 30;  // seconds
  bool options_markdown = false;
};

// Whether CLI11 reads the field itself (numbers, switches, text, lists);
// else the flag's text goes through the table's typed parser.
template <typename T>
inline constexpr bool kReadByCli =
    std::is_arithmetic_v<T> || std::is_same_v<T, std::string> ||
    std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<int64_t>>;

bool ReadByCli(const TrainOption& o) {
  return o.flag_text == FlagText::kPlain &&
         std::visit(
             [](auto m) { return kReadByCli<std::remove_cvref_t<decltype(TrainConfig().*m)>>; },
             o.field);
}

// The option's range as a numeric flag's check (tools/flag_checks.h).
CLI::Validator RangeCheck(const TrainOption& o) {
  if (!o.range.has_value()) return AnyValue();
  const OptionRange& r = *o.range;
  if (r.min_open && r.min == 0) return Positive();
  if (r.max >= std::numeric_limits<double>::max()) return AtLeast(r.min);
  return InRange(r.min, r.max);
}

// A text flag's check: the table's parser and range, as CLI11 reads it
// (so a bad value is refused before anything runs, naming the flag).
CLI::Validator TextCheck(const TrainOption& o) {
  return CLI::Validator(
      [&o](std::string& text) -> std::string {
        TrainConfig parsed;
        Status s = SetOptionFromText(o, o.flag, text, &parsed);
        if (!s.ok()) {
          const std::string prefix = std::string(o.flag) + ": ";
          const std::string& m = s.message();
          return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;
        }
        return OptionRangeError(o, parsed).value_or("");
      },
      "", kRangeCheck);
}

// The option's flag on `cmd`, with its help, default and check.
void AddOptionFlag(CLI::App* cmd, const TrainOption& o, TrainFlags& f) {
  if (!ReadByCli(o)) {
    std::string& text = f.texts[o.flag];
    if (o.show_default) text = OptionValueText(o, TrainConfig());
    CLI::Option* opt = cmd->add_option(o.flag, text, o.help)->check(TextCheck(o));
    if (o.show_default) opt->capture_default_str();
    return;
  }
  std::visit(
      [&](auto m) {
        auto& dst = f.cli.*m;
        using T = std::remove_cvref_t<decltype(dst)>;
        if constexpr (std::is_same_v<T, bool>) {
          cmd->add_flag(o.flag, dst, o.help);
        } else if constexpr (kReadByCli<T>) {
          CLI::Option* opt = cmd->add_option(o.flag, dst, o.help);
          if constexpr (!std::is_same_v<T, std::string> &&
                        !std::is_same_v<T, std::vector<std::string>>) {
            opt->check(RangeCheck(o));
          }
          if (o.show_default) opt->capture_default_str();
        }
      },
      o.field);
}

// Flags given override the config, and are where their settings came from
// (ValidateTrainConfig's errors name them).
Status ApplyFlags(const CLI::App& cmd, const TrainFlags& f, TrainConfig* config) {
  for (const TrainOption& o : TrainOptions()) {
    if (*o.flag == '\0' || cmd.count(o.flag) == 0) continue;
    config->origins[o.name] = o.flag;
    if (!ReadByCli(o)) {
      TF_RETURN_IF_ERROR(SetOptionFromText(o, o.flag, f.texts.at(o.flag), config));
      continue;
    }
    std::visit(
        [&](auto m) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(config->*m)>, bool>) {
            config->*m = o.switch_value;
          } else {
            config->*m = f.cli.*m;
          }
        },
        o.field);
  }
  return Status::Ok();
}

// --nproc-per-node: this process starts the ranks through mpirun and waits;
// the exit code, or nullopt to run here (as one rank or alone).
std::optional<int> LaunchRanks(const TrainFlags& f) {
  auto launch = comm::DetectLaunch(comm::ProcessEnv());
  if (!launch.ok()) {
    std::fprintf(stderr, "tierflow train: %s\n", launch.status().ToString().c_str());
    return 2;
  }
  if (f.nproc_per_node <= 1) return std::nullopt;
  if (launch->has_value()) {
    std::fprintf(stderr,
                 "tierflow train: --nproc-per-node %d, but this process is already rank %d of "
                 "%d started by %s: leave --nproc-per-node out under a launcher\n",
                 f.nproc_per_node, (*launch)->rank, (*launch)->world_size,
                 (*launch)->launcher.c_str());
    return 2;
  }
  StatusOr<int> ran = RunRanksUnderMpirun(f.nproc_per_node, WithoutNprocPerNode(CommandLineArgs()));
  if (!ran.ok()) {
    std::fprintf(stderr, "tierflow train: %s\n", ran.status().ToString().c_str());
    return 2;
  }
  return *ran;
}

// Defaults < config file < flags given on the command line, checked.
// Errors (usage, exit 2) name where the setting came from.
StatusOr<TrainConfig> ResolveConfig(const CLI::App& cmd, const TrainFlags& f, int world_size) {
  TrainConfig config;
  if (!f.config_file.empty()) {
    TF_ASSIGN_OR_RETURN(config, LoadTrainConfig(f.config_file, config, world_size));
  }
  TF_RETURN_IF_ERROR(ApplyFlags(cmd, f, &config));
  for (const std::string& w : config.warnings)
    std::fprintf(stderr, "tierflow train: warning: %s\n", w.c_str());
  // A value out of range, from a flag or the config file, is refused here
  // (exit 2, as a config that does not parse), naming where it was given.
  TF_RETURN_IF_ERROR(ValidateTrainConfig(config));
  for (const std::string& w : ScheduleNotes(config))
    std::fprintf(stderr, "tierflow train: warning: %s\n", w.c_str());
  return config;
}

// Rank 0's last line: how the run ended and what it left.
void ReportDone(const TrainResult& r) {
  if (r.stopped) {
    std::fprintf(
        stderr,
        "tierflow train: stopped by %s at step %lld; checkpoint saved; continue with --resume\n",
        CancelSignal() == SIGTERM   ? "SIGTERM"
        : CancelSignal() == SIGUSR1 ? "SIGUSR1 (mpirun's forward of a stop)"
                                    : "SIGINT",
        static_cast<long long>(r.steps_done));
    return;
  }
  // Some steps skipped is said with the result (every step skipped is an
  // error from RunTraining).
  const std::string skipped = r.steps_skipped == 0 ? ""
                                                   : "; " + std::to_string(r.steps_skipped) +
                                                         " skipped (non-finite gradients)";
  const std::string saved = r.final_model_dir.empty()
                                ? "nothing saved at the end (--final-save none)"
                                : "model saved to " + r.final_model_dir;
  std::fprintf(stderr, "tierflow train: done: %lld steps in %s%s; loss %.4f -> %.4f%s; %s\n",
               static_cast<long long>(r.steps_done), Duration(r.seconds).c_str(), skipped.c_str(),
               r.first_loss, r.last_loss,
               r.eval_loss >= 0 ? (", eval loss " + std::to_string(r.eval_loss)).c_str() : "",
               saved.c_str());
}

// The run itself, on this rank; the exit code.
int RunTrain(const TrainConfig& config, std::optional<RankSetup>& ranks, const TrainFlags& f) {
  const int rank = ranks ? ranks->launch.rank : 0;
  // The first SIGINT/SIGTERM stops training at the next step boundary with
  // a checkpoint (before the first step it cancels the setup); a second one
  // interrupts that checkpoint too, a third kills (common/cancel.h).
  InstallCancelSignalHandlers();
  // Ranks: SIGUSR1 (what mpirun forwards; scancel --signal=USR1 under
  // Slurm) is a stop request too.
  if (ranks) InstallCancelSignalHandler(SIGUSR1);
  ConsoleReporter console(std::max<int64_t>(config.log_every, 1));
  TrainReporter quiet;  // ranks other than 0: errors only
  TrainWorld world;
  if (ranks) {
    world.comm = ranks->comm.get();
    world.local_rank = ranks->launch.local_rank;
    world.local_size = ranks->launch.local_size;
    // Every rank says where it runs: a rank left on one core is the
    // usual cause of a slow optimizer under a launcher.
    std::fprintf(stderr,
                 "tierflow train: rank %d of %d (%s, local %d of %d, pid %d): %d optimizer "
                 "thread%s on CPUs %s%s\n",
                 rank, ranks->launch.world_size, ranks->launch.launcher.c_str(),
                 ranks->launch.local_rank, ranks->launch.local_size, static_cast<int>(::getpid()),
                 ranks->threads, ranks->threads == 1 ? "" : "s", ranks->cpus.c_str(),
                 ranks->rebound ? " (its share of the node; the launcher's binding replaced)" : "");
    // Every rank beats; one that stops (killed, SIGSTOP) ends the job.
    const Status live =
        StartLiveness(*ranks, config.out_dir.empty() ? "tierflow-out" : config.out_dir,
                      std::chrono::milliseconds(static_cast<int64_t>(f.rank_timeout * 1000)));
    if (!live.ok()) {
      std::fprintf(stderr, "tierflow train: %s\n", live.ToString().c_str());
      return 1;
    }
    world.peer_watch = ranks->comm->peer_watch();
  }
  TrainReporter& reporter = rank == 0 ? static_cast<TrainReporter&>(console) : quiet;
  auto result = RunTraining(config, reporter, nullptr, nullptr, world);
  if (!result.ok()) {
    if (rank == 0) {
      std::fprintf(stderr, "\ntierflow train: %s\n", result.status().ToString().c_str());
    } else if (result.status().message().rfind("rank ", 0) != 0) {
      // Its own failure (one agreed from another rank is rank 0's to print).
      std::fprintf(stderr, "tierflow train (rank %d): %s\n", rank,
                   result.status().ToString().c_str());
    }
    return 1;
  }
  if (rank == 0) ReportDone(*result);
  return 0;
}

}  // namespace

void AddTrain(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Fine-tune a model (with no options: a small built-in Llama-style model on the "
      "bundled text, optimizer state on NVMe in a temporary directory)");
  cmd->add_option("--config", f->config_file, "JSON config (tierflow keys and DeepSpeed keys)");
  for (const TrainOption& o : TrainOptions()) {
    if (*o.flag != '\0') AddOptionFlag(cmd, o, *f);
  }
  cmd->add_option("--nproc-per-node", f->nproc_per_node,
                  "Data parallelism on this machine: start this many ranks through mpirun, one "
                  "device each (--grad-accum is per rank; each rank holds 1/N of the optimizer "
                  "state). Under mpirun or srun, leave it out: the launcher's ranks are used")
      ->check(InRange(1, 1024));
  cmd->add_option("--rank-timeout", f->rank_timeout,
                  "Data parallelism: seconds without a heartbeat from a rank (killed, stopped, "
                  "hung) before the others end the job naming it")
      ->check(InRange(1, 86400))
      ->capture_default_str();
  // docs/DEEPSPEED_CONFIG.md's table of options (train_options_test checks it).
  cmd->add_flag("--options-markdown", f->options_markdown,
                "Print the table of train's options and config keys as Markdown")
      ->group("");
  cmd->callback([f, cmd, exit_code] {
    if (f->options_markdown) {
      std::fputs(TrainOptionsMarkdown().c_str(), stdout);
      return;
    }
    if (std::optional<int> launched = LaunchRanks(*f)) {
      *exit_code = *launched;
      return;
    }
    // One of several ranks (mpirun, srun, or --nproc-per-node above): MPI
    // up and this rank on its share of the node's cores.
    auto rank_setup = SetUpRank();
    if (!rank_setup.ok()) {
      std::fprintf(stderr, "tierflow train: %s\n", rank_setup.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    std::optional<RankSetup>& ranks = *rank_setup;
    StatusOr<TrainConfig> config = ResolveConfig(*cmd, *f, ranks ? ranks->launch.world_size : 1);
    if (!config.ok()) {
      std::fprintf(stderr, "tierflow train: %s\n", config.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    *exit_code = RunTrain(*config, ranks, *f);
  });
}

}  // namespace tierflow::cli

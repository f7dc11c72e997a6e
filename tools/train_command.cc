// `tierflow train`: the fine-tuning job. Flags and/or a JSON config (with
// DeepSpeed's keys); progress as a bar on a terminal, plain lines otherwise;
// SIGINT/SIGTERM save a checkpoint and exit cleanly.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "comm/launch_env.h"
#include "common/cancel.h"
#include "common/cpu_isa.h"
#include "common/units.h"
#include "plan/plan_report.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "tools/train_ranks.h"
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
  TrainConfig defaults;
  TrainConfig cli;  // values given on the command line
  std::string config_file;
  bool no_shuffle = false;
  std::string sub_group_size, device_memory, host_memory, nvme_capacity, grad_transfer_dtype,
      speculation, grad_bucket;
  std::string max_sample_bytes;
  // Text flags parsed after CLI11 (ParseOffloadPlacement names the flag).
  std::string offload{OffloadPlacementName(TrainConfig().offload)};
  std::string offload_param{ParamOffloadName(TrainConfig().offload_param)};
  int param_slots = 0;
  int nproc_per_node = 0;    // 0: as launched
  double rank_timeout = 30;  // seconds
  std::string device = DeviceSpecName(TrainConfig().device);
  std::string dtype{DTypeName(TrainConfig().dtype)};
  // Named choices (train/train_choices.h), parsed after CLI11.
  std::string token_dtype, data_format, chat_template;
  std::string truncation{ChoiceName(TrainConfig().truncation)};
  std::string pipeline{ChoiceName(TrainConfig().pipeline)};
  std::string collectives{ChoiceName(TrainConfig().collectives)};
  std::string final_save{ChoiceName(TrainConfig().final_save)};
};

// `text`, given to `flag`, as the choice it names; false (having said why)
// when it names none.
template <typename E>
bool TakeChoice(const char* flag, const std::string& text, E* dst) {
  StatusOr<E> e = ParseChoice<E>(text);
  if (!e.ok()) {
    std::fprintf(stderr, "tierflow train: %s: %s\n", flag, e.status().message().c_str());
    return false;
  }
  *dst = *e;
  return true;
}

}  // namespace

void AddTrain(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<TrainFlags>();
  TrainConfig& c = f->cli;
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Fine-tune a model (with no options: a small built-in Llama-style model on the "
      "bundled text, optimizer state on NVMe in a temporary directory)");
  cmd->add_option("--config", f->config_file, "JSON config (tierflow keys and DeepSpeed keys)");
  cmd->add_option("--model", c.model,
                  "Preset (small-llama, tiny-llama, tiny-gpt2, gpt2, llama-1b, ...) or a Hugging "
                  "Face model directory")
      ->capture_default_str();
  cmd->add_flag("--allow-unused-tensors", c.allow_unused_tensors,
                "A Hugging Face --model whose safetensors hold tensors its config.json does not "
                "use (layers beyond num_hidden_layers, an lm_head copy beside a tied head): "
                "train the ones it uses and list the rest, instead of refusing");
  cmd->add_option("--data", c.data, "Text, JSONL or token file (default: the bundled corpus)");
  cmd->add_option("--token-dtype", f->token_dtype, "Pre-tokenized file: u16 | u32");
  cmd->add_option("--text-field", c.text_field, "JSONL field with the text")->capture_default_str();
  cmd->add_option("--format", f->data_format,
                  "Data format: text | jsonl | tokens (default: by the file's name), or "
                  "instruction JSONL, trained on responses only: prompt-completion "
                  "({prompt, completion}) | alpaca ({instruction, input, output}) | chat "
                  "({messages: [{role, content}]})");
  cmd->add_option("--chat-template", f->chat_template,
                  "Chat template for instruction data: llama3 | chatml | llama2 | mistral "
                  "(default for chat: the tokenizer's; prompt-completion and alpaca are rendered "
                  "plainly unless one is named)");
  cmd->add_option("--truncation", f->truncation,
                  "Instruction samples longer than --seq-len: truncate | drop")
      ->capture_default_str();
  cmd->add_flag("--packing", c.packing,
                "Instruction data: pack several samples per sequence (positions restart and "
                "attention stays within each sample; RoPE models)");
  cmd->add_option("--max-sample-bytes", f->max_sample_bytes,
                  "Instruction data: the longest JSONL line (one sample) read, e.g. 64MiB, up to "
                  "1GiB; a longer line is refused by number before it is parsed (default: 16MiB)");
  cmd->add_option("--tokenizer", c.tokenizer,
                  "byte | tokenizer.json | tokenizer.model | a directory with one of them (or "
                  "vocab.json+merges.txt); default: the model directory's");
  cmd->add_flag("--no-shuffle", f->no_shuffle, "Read the data in order (llm.c's batch layout)");
  cmd->add_option("--seed", c.seed, "Seed for init and shuffling")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--steps", c.steps, "Optimizer steps")->check(AtLeast(1))->capture_default_str();
  cmd->add_option("--micro-batch", c.micro_batch, "Sequences per micro-batch")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--grad-accum", c.grad_accum, "Micro-batches per optimizer step")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--seq-len", c.seq_len, "Tokens per sequence")
      ->check(AtLeast(2))
      ->capture_default_str();
  cmd->add_option("--lr", c.lr, "Learning rate")->check(Positive())->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "AdamW weight decay")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--clip", c.gradient_clipping, "Global gradient-norm clipping (0 = off)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "Working weights: bf16 | fp16 | fp32")
      ->capture_default_str();
  cmd->add_option("--grad-transfer-dtype", f->grad_transfer_dtype,
                  "Gradients across PCIe: bf16 | fp16 | fp32 (default: --dtype when 16-bit, "
                  "else fp32; fp16 needs fp16 weights)");
  cmd->add_flag("--activation-checkpointing", c.activation_checkpointing,
                "Recompute blocks in backward");
  cmd->add_option("--offload-optimizer", f->offload,
                  "Where optimizer state lives: auto | host | nvme (auto: the planner's "
                  "placement, host RAM when it fits, else the smallest NVMe share that does)")
      ->capture_default_str();
  cmd->add_option("--offload-param", f->offload_param,
                  "Where the weights of units off the device live: auto | none | host | nvme "
                  "(auto: all on the device when they fit, else the planner streams some from "
                  "host, or NVMe when host memory is short)");
  cmd->add_option("--param-slots", f->param_slots,
                  "Device slots for streamed weights (>= 2; default: the planner's)")
      ->check(InRange(2, 64));
  cmd->add_option("--nvme-path", c.nvme_paths,
                  "NVMe directory (repeat per drive; default: a temporary directory)");
  cmd->add_flag("--nvme-buffered", c.nvme_buffered,
                "Buffered I/O for file systems without O_DIRECT");
  cmd->add_option("--pipeline", f->pipeline, "overlapped | sync")->capture_default_str();
  cmd->add_option("--collectives", f->collectives,
                  "Data parallelism: where the gradient is summed and the weights gathered: "
                  "device (NCCL on GPUs, MPI over the CPU device's memory: only each rank's part "
                  "crosses PCIe), host (MPI: every rank lands the whole gradient), auto (device "
                  "where NCCL serves it). device with one rank runs that path over a world of one: "
                  "how one GPU checks it")
      ->capture_default_str();
  cmd->add_option("--profile", c.profile,
                  "Hardware profile from `tierflow bench all` or `bench nvme --tune --profile`: "
                  "its NVMe store settings build the NVMe tier (without one, a start-up probe "
                  "picks them; aio keys override both) and its rates feed the plan (default: the "
                  "one `tierflow bench all` saved in ~/.cache/tierflow, when there is one)");
  cmd->add_option("--speculation", f->speculation,
                  std::string("Overlapped pipeline: parameters updated speculatively per step, or "
                              "auto: as many as free host memory allows (default auto; ") +
                      kCountSuffixHelp + ")")
      ->check(CountAtLeast(0, "auto"));
  cmd->add_option("--grad-bucket", f->grad_bucket,
                  std::string("Parameters per gradient bucket, or auto: the planner's choice "
                              "(default auto; ") +
                      kCountSuffixHelp + ")")
      ->check(CountAtLeast(1, "auto"));
  cmd->add_option("--sub-group-size", f->sub_group_size,
                  std::string("Optimizer sub-groups: slices of at most this many parameters "
                              "(default 4Mi; overrides a config's rule; ") +
                      kCountSuffixHelp + ")")
      ->check(CountAtLeast(1));
  cmd->add_option("--device", f->device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_option("--device-memory", f->device_memory, "Device memory limit (e.g. 2GiB)")
      ->check(ByteSizeAtLeast(1));
  cmd->add_option("--host-memory", f->host_memory,
                  "Host RAM the planner may place into (default: the usable memory detected)")
      ->check(ByteSizeAtLeast(1));
  cmd->add_option("--nvme-capacity", f->nvme_capacity,
                  "NVMe space the planner may place into (default: the NVMe paths' free space)")
      ->check(ByteSizeAtLeast(0));
  cmd->add_option("--out", c.out_dir, "Output directory (checkpoints, final model, metrics)");
  cmd->add_option("--checkpoint-every", c.checkpoint_every,
                  "Steps between checkpoints (0 = at the end)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--final-save", f->final_save,
                  "What the run saves after its last step: all (a checkpoint and OUT/model), "
                  "model, or none (a measurement)")
      ->capture_default_str();
  cmd->add_flag(
      "--resume", c.resume,
      "Continue from the newest checkpoint under --out (an error when it does not verify)");
  cmd->add_option("--resume-from", c.resume_from,
                  "Continue from this checkpoint directory (e.g. an older one when the newest does "
                  "not verify)");
  cmd->add_option("--metrics", c.metrics_path, "Metrics JSONL file (default: OUT/metrics.jsonl)");
  cmd->add_option("--trace", c.trace_path, "Chrome trace file of the --trace-steps");
  cmd->add_option("--trace-steps", c.trace_steps, "Steps to trace (default: 2)")->check(AtLeast(1));
  cmd->add_option("--eval-every", c.eval_every, "Steps between eval losses (0 = never)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--log-every", c.log_every, "Steps between progress lines when not on a terminal")
      ->check(AtLeast(1))
      ->capture_default_str();
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
  cmd->callback([f, cmd, exit_code] {
    auto launch = comm::DetectLaunch(comm::ProcessEnv());
    if (!launch.ok()) {
      std::fprintf(stderr, "tierflow train: %s\n", launch.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    if (f->nproc_per_node > 1) {
      if (launch->has_value()) {
        std::fprintf(stderr,
                     "tierflow train: --nproc-per-node %d, but this process is already rank %d of "
                     "%d started by %s: leave --nproc-per-node out under a launcher\n",
                     f->nproc_per_node, (*launch)->rank, (*launch)->world_size,
                     (*launch)->launcher.c_str());
        *exit_code = 2;
        return;
      }
      StatusOr<int> ran =
          RunRanksUnderMpirun(f->nproc_per_node, WithoutNprocPerNode(CommandLineArgs()));
      if (!ran.ok()) {
        std::fprintf(stderr, "tierflow train: %s\n", ran.status().ToString().c_str());
        *exit_code = 2;
        return;
      }
      *exit_code = *ran;
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
    const std::optional<RankSetup>& ranks = *rank_setup;
    const int rank = ranks ? ranks->launch.rank : 0;
    // Defaults < config file < flags given on the command line.
    TrainConfig config = f->defaults;
    if (!f->config_file.empty()) {
      auto loaded = LoadTrainConfig(f->config_file, config, ranks ? ranks->launch.world_size : 1);
      if (!loaded.ok()) {
        std::fprintf(stderr, "tierflow train: %s\n", loaded.status().ToString().c_str());
        *exit_code = 2;
        return;
      }
      config = std::move(loaded).value();
    }
    const TrainConfig& c = f->cli;
    // A flag given overrides the config, and is where its setting came from
    // (ValidateTrainConfig's errors name it).
    auto given = [&](const char* flag, const char* setting) {
      if (cmd->count(flag) == 0) return false;
      config.origins[setting] = flag;
      return true;
    };
    if (given("--model", "model")) config.model = c.model;
    if (given("--allow-unused-tensors", "allow_unused_tensors")) {
      config.allow_unused_tensors = true;
    }
    if (given("--data", "data")) config.data = c.data;
    if (given("--token-dtype", "token_dtype") &&
        !TakeChoice("--token-dtype", f->token_dtype, &config.token_dtype)) {
      *exit_code = 2;
      return;
    }
    if (given("--text-field", "text_field")) config.text_field = c.text_field;
    if (given("--format", "data_format") &&
        !TakeChoice("--format", f->data_format, &config.data_format)) {
      *exit_code = 2;
      return;
    }
    if (given("--chat-template", "chat_template") &&
        !TakeChoice("--chat-template", f->chat_template, &config.chat_template)) {
      *exit_code = 2;
      return;
    }
    if (given("--truncation", "truncation") &&
        !TakeChoice("--truncation", f->truncation, &config.truncation)) {
      *exit_code = 2;
      return;
    }
    if (given("--packing", "packing")) config.packing = true;
    if (given("--max-sample-bytes", "max_sample_bytes")) {
      auto n = ParseByteSize(f->max_sample_bytes);
      if (!n.ok()) {
        std::fprintf(stderr, "tierflow train: --max-sample-bytes: %s\n",
                     n.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.max_sample_bytes = *n;
    }
    if (given("--tokenizer", "tokenizer")) config.tokenizer = c.tokenizer;
    if (given("--no-shuffle", "shuffle")) config.shuffle = false;
    if (given("--seed", "seed")) config.seed = c.seed;
    if (given("--steps", "steps")) config.steps = c.steps;
    if (given("--micro-batch", "micro_batch")) config.micro_batch = c.micro_batch;
    if (given("--grad-accum", "grad_accum")) config.grad_accum = c.grad_accum;
    if (given("--seq-len", "seq_len")) config.seq_len = c.seq_len;
    if (given("--lr", "lr")) config.lr = c.lr;
    if (given("--weight-decay", "weight_decay")) config.weight_decay = c.weight_decay;
    if (given("--clip", "gradient_clipping")) config.gradient_clipping = c.gradient_clipping;
    if (given("--dtype", "dtype")) {
      auto dtype = ParseDType(f->dtype);
      if (!dtype.ok()) {
        std::fprintf(stderr, "tierflow train: --dtype: %s\n", dtype.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.dtype = *dtype;
    }
    if (given("--grad-transfer-dtype", "grad_transfer_dtype")) {
      auto t = ParseDType(f->grad_transfer_dtype);
      if (!t.ok()) {
        std::fprintf(stderr, "tierflow train: --grad-transfer-dtype: %s\n",
                     t.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.grad_transfer_dtype = *t;
    }
    if (given("--activation-checkpointing", "activation_checkpointing"))
      config.activation_checkpointing = true;
    if (given("--offload-optimizer", "offload")) {
      auto placement = ParseOffloadPlacement("--offload-optimizer", f->offload);
      if (!placement.ok()) {
        std::fprintf(stderr, "tierflow train: %s\n", placement.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.offload = *placement;
    }
    if (given("--offload-param", "offload_param")) {
      auto where = ParseParamOffload("--offload-param", f->offload_param);
      if (!where.ok()) {
        std::fprintf(stderr, "tierflow train: %s\n", where.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.offload_param = *where;
    }
    if (given("--param-slots", "param_slots")) config.param_slots = f->param_slots;
    if (given("--nvme-path", "nvme_paths")) config.nvme_paths = c.nvme_paths;
    if (given("--nvme-buffered", "nvme_buffered")) config.nvme_buffered = true;
    if (given("--pipeline", "pipeline") &&
        !TakeChoice("--pipeline", f->pipeline, &config.pipeline)) {
      *exit_code = 2;
      return;
    }
    if (given("--collectives", "collectives") &&
        !TakeChoice("--collectives", f->collectives, &config.collectives)) {
      *exit_code = 2;
      return;
    }
    if (given("--profile", "profile")) config.profile = c.profile;
    if (given("--device", "device")) {
      auto spec = ParseDeviceSpec("--device", f->device);
      if (!spec.ok()) {
        std::fprintf(stderr, "tierflow train: %s\n", spec.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.device = *spec;
    }
    if (given("--out", "out_dir")) config.out_dir = c.out_dir;
    if (given("--checkpoint-every", "checkpoint_every"))
      config.checkpoint_every = c.checkpoint_every;
    if (given("--final-save", "final_save") &&
        !TakeChoice("--final-save", f->final_save, &config.final_save)) {
      *exit_code = 2;
      return;
    }
    if (given("--resume", "resume")) config.resume = true;
    if (given("--resume-from", "resume_from")) config.resume_from = c.resume_from;
    if (given("--metrics", "metrics_path")) config.metrics_path = c.metrics_path;
    if (given("--trace", "trace_path")) config.trace_path = c.trace_path;
    if (given("--trace-steps", "trace_steps")) config.trace_steps = c.trace_steps;
    if (given("--eval-every", "eval_every")) config.eval_every = c.eval_every;
    if (given("--log-every", "log_every")) config.log_every = c.log_every;
    if (given("--device-memory", "device_memory")) config.device_memory = f->device_memory;
    if (given("--host-memory", "host_memory")) config.host_memory = f->host_memory;
    if (given("--nvme-capacity", "nvme_capacity")) config.nvme_capacity = f->nvme_capacity;
    if (given("--sub-group-size", "sub_group_size")) {
      auto n = ParseCount(f->sub_group_size);
      if (!n.ok()) {
        std::fprintf(stderr, "tierflow train: --sub-group-size: %s\n",
                     n.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.sub_group_size = *n;
      config.sub_group_cut = SubGroupCut::kSlices;  // the flag's rule, over a config's
    }
    if (given("--speculation", "speculation_params") && f->speculation == "auto") {
      config.speculation_params.reset();
    } else if (!f->speculation.empty()) {
      auto n = ParseCount(f->speculation);
      if (!n.ok()) {
        std::fprintf(stderr, "tierflow train: --speculation: %s\n", n.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.speculation_params = *n;
    }
    if (given("--grad-bucket", "grad_bucket_params") && f->grad_bucket == "auto") {
      config.grad_bucket_params.reset();
    } else if (!f->grad_bucket.empty()) {
      auto n = ParseCount(f->grad_bucket);
      if (!n.ok()) {
        std::fprintf(stderr, "tierflow train: --grad-bucket: %s\n", n.status().message().c_str());
        *exit_code = 2;
        return;
      }
      config.grad_bucket_params = *n;
    }
    for (const std::string& w : config.warnings)
      std::fprintf(stderr, "tierflow train: warning: %s\n", w.c_str());
    // A value out of range, from a flag or the config file, is refused here
    // (exit 2, as a config that does not parse), naming where it was given.
    if (Status valid = ValidateTrainConfig(config); !valid.ok()) {
      std::fprintf(stderr, "tierflow train: %s\n", valid.ToString().c_str());
      *exit_code = 2;
      return;
    }
    for (const std::string& w : ScheduleNotes(config))
      std::fprintf(stderr, "tierflow train: warning: %s\n", w.c_str());

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
      std::fprintf(
          stderr,
          "tierflow train: rank %d of %d (%s, local %d of %d, pid %d): %d optimizer "
          "thread%s on CPUs %s%s\n",
          rank, ranks->launch.world_size, ranks->launch.launcher.c_str(), ranks->launch.local_rank,
          ranks->launch.local_size, static_cast<int>(::getpid()), ranks->threads,
          ranks->threads == 1 ? "" : "s", ranks->cpus.c_str(),
          ranks->rebound ? " (its share of the node; the launcher's binding replaced)" : "");
      // Every rank beats; one that stops (killed, SIGSTOP) ends the job.
      const Status live = StartLiveness(
          *rank_setup.value(), config.out_dir.empty() ? "tierflow-out" : config.out_dir,
          std::chrono::milliseconds(static_cast<int64_t>(f->rank_timeout * 1000)));
      if (!live.ok()) {
        std::fprintf(stderr, "tierflow train: %s\n", live.ToString().c_str());
        *exit_code = 1;
        return;
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
      *exit_code = 1;
      return;
    }
    if (rank != 0) return;
    const TrainResult& r = *result;
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
  });
}

}  // namespace tierflow::cli

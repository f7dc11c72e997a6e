// The table of `tierflow train`'s options (train_options.h) and the typed
// reading, printing and range checking every row shares.
#include "train/train_options.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "common/units.h"

namespace tierflow {
namespace {

// In `--help` order: data, batch, precision, optimizer, offload, device, output.
const TrainOption kRows[] = {
    {.name = "model",
     .json_key = "model",
     .flag = "--model",
     .deepspeed = "",
     .help = "Preset (small-llama, tiny-llama, tiny-gpt2, gpt2, llama-1b, ...) or a Hugging Face "
             "model directory",
     .field = &TrainConfig::model},
    {.name = "allow_unused_tensors",
     .json_key = "allow_unused_tensors",
     .flag = "--allow-unused-tensors",
     .deepspeed = "",
     .help = "A Hugging Face --model whose safetensors hold tensors its config.json does not use "
             "(layers beyond num_hidden_layers, an lm_head copy beside a tied head): train the "
             "ones it uses and list the rest, instead of refusing",
     .field = &TrainConfig::allow_unused_tensors,
     .show_default = false},
    {.name = "data",
     .json_key = "data",
     .flag = "--data",
     .deepspeed = "",
     .help = "Text, JSONL or token file (default: the bundled corpus)",
     .field = &TrainConfig::data,
     .show_default = false},
    {.name = "token_dtype",
     .json_key = "token_dtype",
     .flag = "--token-dtype",
     .deepspeed = "",
     .help = "Pre-tokenized file: u16 | u32",
     .field = &TrainConfig::token_dtype,
     .show_default = false},
    {.name = "text_field",
     .json_key = "text_field",
     .flag = "--text-field",
     .deepspeed = "",
     .help = "JSONL field with the text",
     .field = &TrainConfig::text_field},
    {.name = "data_format",
     .json_key = "data_format",
     .flag = "--format",
     .deepspeed = "",
     .help = "Data format: text | jsonl | tokens (default: by the file's name), or instruction "
             "JSONL, trained on responses only: prompt-completion ({prompt, completion}) | alpaca "
             "({instruction, input, output}) | chat ({messages: [{role, content}]})",
     .field = &TrainConfig::data_format,
     .show_default = false},
    {.name = "chat_template",
     .json_key = "chat_template",
     .flag = "--chat-template",
     .deepspeed = "",
     .help = "Chat template for instruction data: llama3 | chatml | llama2 | mistral (default for "
             "chat: the tokenizer's; prompt-completion and alpaca are rendered plainly unless one "
             "is named)",
     .field = &TrainConfig::chat_template,
     .show_default = false},
    {.name = "truncation",
     .json_key = "truncation",
     .flag = "--truncation",
     .deepspeed = "",
     .help = "Instruction samples longer than --seq-len: truncate | drop",
     .field = &TrainConfig::truncation},
    {.name = "packing",
     .json_key = "packing",
     .flag = "--packing",
     .deepspeed = "",
     .help = "Instruction data: pack several samples per sequence (positions restart and attention "
             "stays within each sample; RoPE models)",
     .field = &TrainConfig::packing,
     .show_default = false},
    {.name = "max_sample_bytes",
     .json_key = "max_sample_bytes",
     .flag = "--max-sample-bytes",
     .deepspeed = "",
     .help = "Instruction data: the longest JSONL line (one sample) read, e.g. 64MiB, up to 1GiB; "
             "a longer line is refused by number before it is parsed (default: 16MiB)",
     .field = &TrainConfig::max_sample_bytes,
     .range = OptionRange{.min = 1, .max = 1073741824, .wanted = "1 byte to 1GiB"},
     .flag_text = FlagText::kByteSize,
     .json_min = 1,
     .show_default = false},
    {.name = "tokenizer",
     .json_key = "tokenizer",
     .flag = "--tokenizer",
     .deepspeed = "",
     .help = "byte | tokenizer.json | tokenizer.model | a directory with one of them (or "
             "vocab.json+merges.txt); default: the model directory's",
     .field = &TrainConfig::tokenizer,
     .show_default = false},
    {.name = "shuffle",
     .json_key = "shuffle",
     .flag = "--no-shuffle",
     .deepspeed = "",
     .help = "Read the data in order (llm.c's batch layout)",
     .field = &TrainConfig::shuffle,
     .switch_value = false,
     .show_default = false},
    {.name = "seed",
     .json_key = "seed",
     .flag = "--seed",
     .deepspeed = "",
     .help = "Seed for init and shuffling",
     .field = &TrainConfig::seed,
     .range = OptionRange{.min = 0, .wanted = "0 or more"}},
    {.name = "eval_fraction",
     .json_key = "eval_fraction",
     .flag = "",
     .deepspeed = "",
     .help = "Held-out share of the data",
     .field = &TrainConfig::eval_fraction,
     .range = OptionRange{.min = 0, .max = 1, .max_open = true, .wanted = "a fraction in [0, 1)"}},
    {.name = "eval_every",
     .json_key = "eval_every",
     .flag = "--eval-every",
     .deepspeed = "",
     .help = "Steps between eval losses (0 = never)",
     .field = &TrainConfig::eval_every,
     .range = OptionRange{.min = 0, .wanted = "0 (never) or more"}},
    {.name = "eval_batches",
     .json_key = "eval_batches",
     .flag = "",
     .deepspeed = "",
     .help = "Batches per eval loss",
     .field = &TrainConfig::eval_batches},
    {.name = "micro_batch",
     .json_key = "micro_batch",
     .flag = "--micro-batch",
     .deepspeed = "train_micro_batch_size_per_gpu",
     .help = "Sequences per micro-batch",
     .field = &TrainConfig::micro_batch,
     .range = OptionRange{.min = 1, .wanted = "1 or more"}},
    {.name = "grad_accum",
     .json_key = "grad_accum",
     .flag = "--grad-accum",
     .deepspeed = "gradient_accumulation_steps",
     .help = "Micro-batches per optimizer step",
     .field = &TrainConfig::grad_accum,
     .range = OptionRange{.min = 1, .wanted = "1 or more"}},
    {.name = "seq_len",
     .json_key = "seq_len",
     .flag = "--seq-len",
     .deepspeed = "",
     .help = "Tokens per sequence",
     .field = &TrainConfig::seq_len,
     .range = OptionRange{.min = 2, .wanted = "2 or more (one input and one target token)"}},
    {.name = "steps",
     .json_key = "steps",
     .flag = "--steps",
     .deepspeed = "",
     .help = "Optimizer steps",
     .field = &TrainConfig::steps,
     .range = OptionRange{.min = 1, .wanted = "1 or more"}},
    {.name = "activation_checkpointing",
     .json_key = "activation_checkpointing",
     .flag = "--activation-checkpointing",
     .deepspeed = "",
     .help = "Recompute blocks in backward",
     .field = &TrainConfig::activation_checkpointing,
     .show_default = false},
    {.name = "offload_activations",
     .json_key = "offload_activations",
     .flag = "--offload-activations",
     .deepspeed = "",
     .help = "Where the activation checkpoints live: auto | none | host (auto: on the device "
             "while the run fits there, else in pinned host memory when that fits or steps "
             "faster than streaming weights; host needs --activation-checkpointing)",
     .field = &TrainConfig::offload_activations},
    {.name = "offload_gradients",
     .json_key = "offload_gradients",
     .flag = "--offload-gradients",
     .deepspeed = "",
     .help = "Where the step's gradients wait for its clip/overflow decision: auto | host | nvme "
             "(auto: in host memory while the host holds them, else on NVMe; nvme: a few pinned "
             "sub-group slots, the rest on the drives beside the optimizer state, which must be "
             "wholly on NVMe; one process)",
     .field = &TrainConfig::offload_gradients},
    {.name = "mlp_tile_rows",
     .json_key = "mlp_tile_rows",
     .flag = "--mlp-tile-rows",
     .deepspeed = "",
     .help = "The MLP in row tiles of this many rows (a multiple of 256; 0: untiled), or auto: "
             "untiled while the run fits so, else 4096 (default auto)",
     .field = &TrainConfig::mlp_tile_rows,
     .range = OptionRange{.min = 0,
                          .max = 1099511627776,
                          .wanted = "0 or a multiple of 256, or leave it to the planner"},
     .flag_text = FlagText::kCount,
     .json_min = 0,
     .show_default = false},
    {.name = "dtype",
     .json_key = "dtype",
     .flag = "--dtype",
     .deepspeed = "fp16.enabled, bf16.enabled",
     .help = "Working weights: bf16 | fp16 | fp32",
     .field = &TrainConfig::dtype},
    {.name = "grad_transfer_dtype",
     .json_key = "grad_transfer_dtype",
     .flag = "--grad-transfer-dtype",
     .deepspeed = "",
     .help = "Gradients across PCIe: bf16 | fp16 | fp32 (default: --dtype when 16-bit, else fp32; "
             "fp16 needs fp16 weights)",
     .field = &TrainConfig::grad_transfer_dtype,
     .show_default = false,
     .json_any_case = true},
    {.name = "loss_scale",
     .json_key = "loss_scale",
     .flag = "",
     .deepspeed = "fp16.loss_scale",
     .help = "fp16: 0 = dynamic; > 0 = static scale",
     .field = &TrainConfig::loss_scale},
    {.name = "initial_scale_power",
     .json_key = "initial_scale_power",
     .flag = "",
     .deepspeed = "fp16.initial_scale_power",
     .help = "fp16: the dynamic scale starts at 2^power (0..63)",
     .field = &TrainConfig::initial_scale_power},
    {.name = "loss_scale_window",
     .json_key = "loss_scale_window",
     .flag = "",
     .deepspeed = "fp16.loss_scale_window",
     .help = "fp16: good steps before the scale doubles",
     .field = &TrainConfig::loss_scale_window},
    {.name = "hysteresis",
     .json_key = "hysteresis",
     .flag = "",
     .deepspeed = "fp16.hysteresis",
     .help = "fp16: overflows tolerated before the scale halves",
     .field = &TrainConfig::hysteresis},
    {.name = "min_loss_scale",
     .json_key = "min_loss_scale",
     .flag = "",
     .deepspeed = "fp16.min_loss_scale",
     .help = "fp16: the smallest dynamic scale",
     .field = &TrainConfig::min_loss_scale},
    {.name = "optimizer",
     .json_key = "optimizer",
     .flag = "",
     .deepspeed = "optimizer.type",
     .help = "adamw | adam (here adam means L2 decay, unlike DeepSpeed's type \"Adam\")",
     .field = &TrainConfig::optimizer,
     .json_any_case = true},
    {.name = "lr",
     .json_key = "lr",
     .flag = "--lr",
     .deepspeed = "optimizer.params.lr",
     .help = "Learning rate",
     .field = &TrainConfig::lr,
     .range =
         OptionRange{.min = 0, .min_open = true, .wanted = "a positive, finite learning rate"}},
    {.name = "beta1",
     .json_key = "beta1",
     .flag = "",
     .deepspeed = "optimizer.params.betas[0]",
     .help = "Adam's beta1",
     .field = &TrainConfig::beta1,
     .range =
         OptionRange{
             .min = 0, .max = 1, .max_open = true, .wanted = "a value in [0, 1) (e.g. 0.9)"}},
    {.name = "beta2",
     .json_key = "beta2",
     .flag = "",
     .deepspeed = "optimizer.params.betas[1]",
     .help = "Adam's beta2",
     .field = &TrainConfig::beta2,
     .range =
         OptionRange{
             .min = 0, .max = 1, .max_open = true, .wanted = "a value in [0, 1) (e.g. 0.999)"}},
    {.name = "eps",
     .json_key = "eps",
     .flag = "",
     .deepspeed = "optimizer.params.eps",
     .help = "Adam's epsilon",
     .field = &TrainConfig::eps,
     .range = OptionRange{.min = 0, .wanted = "0 or a small positive value (e.g. 1e-8)"}},
    {.name = "weight_decay",
     .json_key = "weight_decay",
     .flag = "--weight-decay",
     .deepspeed = "optimizer.params.weight_decay",
     .help = "AdamW weight decay",
     .field = &TrainConfig::weight_decay,
     .range = OptionRange{.min = 0, .wanted = "0 or more"}},
    {.name = "gradient_clipping",
     .json_key = "gradient_clipping",
     .flag = "--clip",
     .deepspeed = "gradient_clipping",
     .help = "Global gradient-norm clipping (0 = off)",
     .field = &TrainConfig::gradient_clipping,
     .range = OptionRange{.min = 0, .wanted = "0 (off) or a positive max norm"}},
    {.name = "offload",
     .json_key = "offload",
     .flag = "--offload-optimizer",
     .deepspeed = "zero_optimization.offload_optimizer.device",
     .help = "Where optimizer state lives: auto | host | nvme (auto: the planner's placement, host "
             "RAM when it fits, else the smallest NVMe share that does)",
     .field = &TrainConfig::offload,
     .json_any_case = true},
    {.name = "offload_param",
     .json_key = "offload_param",
     .flag = "--offload-param",
     .deepspeed = "zero_optimization.offload_param.device",
     .help = "Where the weights of units off the device live: auto | none | host | nvme (auto: all "
             "on the device when they fit, else the planner streams some from host, or NVMe when "
             "host memory is short)",
     .field = &TrainConfig::offload_param,
     .show_default = false,
     .json_any_case = true},
    {.name = "param_slots",
     .json_key = "param_slots",
     .flag = "--param-slots",
     .deepspeed = "",
     .help = "Device slots for streamed weights (>= 2; default: the planner's)",
     .field = &TrainConfig::param_slots,
     .range =
         OptionRange{
             .min = 2, .max = 64, .wanted = "2 to 64 device slots for the streamed weights' ring"},
     .json_min = 2,
     .show_default = false},
    {.name = "nvme_paths",
     .json_key = "nvme_paths",
     .flag = "--nvme-path",
     .deepspeed = "zero_optimization.offload_optimizer.nvme_path",
     .help = "NVMe directory (repeat per drive; default: a temporary directory)",
     .field = &TrainConfig::nvme_paths,
     .show_default = false},
    {.name = "nvme_buffered",
     .json_key = "nvme_buffered",
     .flag = "--nvme-buffered",
     .deepspeed = "",
     .help = "Buffered I/O for file systems without O_DIRECT",
     .field = &TrainConfig::nvme_buffered,
     .show_default = false},
    {.name = "nvme_ratio",
     .json_key = "nvme_ratio",
     .flag = "",
     .deepspeed = "",
     .help = "The share of the state on NVMe (the last sub-groups), the rest in host RAM; with "
             "offload nvme",
     .field = &TrainConfig::nvme_ratio,
     .range = OptionRange{.min = 0, .max = 1, .wanted = "a fraction in [0, 1]"}},
    {.name = "buffer_count",
     .json_key = "buffer_count",
     .flag = "",
     .deepspeed = "",
     .help = "Weight-staging and NVMe I/O slots, each holding one sub-group's state (>= 2; 0: 4, "
             "or the profile's in_flight + 2)",
     .field = &TrainConfig::buffer_count,
     .json_min = 1},
    {.name = "sub_group_size",
     .json_key = "sub_group_size",
     .flag = "--sub-group-size",
     .deepspeed = "zero_optimization.sub_group_size",
     .help = std::string("Optimizer sub-groups: slices of at most this many parameters (default "
                         "4Mi; overrides a config's rule; ") +
             kCountSuffixHelp + ")",
     .field = &TrainConfig::sub_group_size,
     .flag_text = FlagText::kCount,
     .json_min = 1,
     .show_default = false},
    {.name = "pin_memory",
     .json_key = "pin_memory",
     .flag = "",
     .deepspeed = "zero_optimization.offload_optimizer.pin_memory",
     .help = "Page-lock the host tier's optimizer state",
     .field = &TrainConfig::pin_memory},
    {.name = "aio_block_size",
     .json_key = "aio_block_size",
     .flag = "",
     .deepspeed = "aio.block_size",
     .help = "NVMe: bytes per I/O request (a multiple of 4096; 0: the profile's or the probe's)",
     .field = &TrainConfig::aio_block_size,
     .json_min = 1},
    {.name = "aio_queue_depth",
     .json_key = "aio_queue_depth",
     .flag = "",
     .deepspeed = "aio.queue_depth",
     .help = "NVMe: io_uring queue depth per ring (0: the profile's or the probe's)",
     .field = &TrainConfig::aio_queue_depth,
     .range = OptionRange{.min = 0, .max = 4096, .wanted = "1..4096"},
     .json_min = 1},
    {.name = "aio_threads",
     .json_key = "aio_threads",
     .flag = "",
     .deepspeed = "aio.thread_count",
     .help = "NVMe: io_uring rings (0: the profile's or the probe's)",
     .field = &TrainConfig::aio_threads,
     .range = OptionRange{.min = 0, .max = 64, .wanted = "1..64 io_uring rings"},
     .json_min = 1},
    {.name = "profile",
     .json_key = "profile",
     .flag = "--profile",
     .deepspeed = "",
     .help = "Hardware profile from `tierflow bench all` or `bench nvme --tune --profile`: its "
             "NVMe store settings build the NVMe tier (without one, a start-up probe picks them; "
             "aio keys override both) and its rates feed the plan (default: the one `tierflow "
             "bench all` saved in ~/.cache/tierflow, when there is one)",
     .field = &TrainConfig::profile,
     .show_default = false},
    {.name = "pipeline",
     .json_key = "pipeline",
     .flag = "--pipeline",
     .deepspeed = "",
     .help = "overlapped | sync",
     .field = &TrainConfig::pipeline},
    {.name = "collectives",
     .json_key = "collectives",
     .flag = "--collectives",
     .deepspeed = "",
     .help =
         "Data parallelism: where the gradient is summed and the weights gathered: device (NCCL on "
         "GPUs, MPI over the CPU device's memory: only each rank's part crosses PCIe), host (MPI: "
         "every rank lands the whole gradient), auto (device where NCCL serves it). device with "
         "one rank runs that path over a world of one: how one GPU checks it",
     .field = &TrainConfig::collectives},
    {.name = "speculation_params",
     .json_key = "speculation_params",
     .flag = "--speculation",
     .deepspeed = "",
     .help = std::string("Overlapped pipeline: parameters updated speculatively per step, or auto: "
                         "as many as free host memory allows (default auto; ") +
             kCountSuffixHelp + ")",
     .field = &TrainConfig::speculation_params,
     .range = OptionRange{.min = 0,
                          .max = 1099511627776,
                          .wanted = "at most 2^40 parameters (any value at or above the model's "
                                    "parameter count speculates on all of it)"},
     .flag_text = FlagText::kCount,
     .json_min = 0,
     .show_default = false},
    {.name = "grad_bucket_params",
     .json_key = "grad_bucket_params",
     .flag = "--grad-bucket",
     .deepspeed = "",
     .help = std::string(
                 "Parameters per gradient bucket, or auto: the planner's choice (default auto; ") +
             kCountSuffixHelp + ")",
     .field = &TrainConfig::grad_bucket_params,
     .range = OptionRange{.min = 1,
                          .max = 1099511627776,
                          .wanted = "1 to 2^40 parameters, or leave it to the planner"},
     .flag_text = FlagText::kCount,
     .json_min = 1,
     .show_default = false},
    {.name = "device",
     .json_key = "device",
     .flag = "--device",
     .deepspeed = "",
     .help = "auto | cpu | cuda | sim:PROFILE",
     .field = &TrainConfig::device},
    {.name = "device_memory",
     .json_key = "device_memory",
     .flag = "--device-memory",
     .deepspeed = "",
     .help = "Device memory limit (e.g. 2GiB)",
     .field = &TrainConfig::device_memory,
     .flag_text = FlagText::kByteSize,
     .show_default = false},
    {.name = "host_memory",
     .json_key = "host_memory",
     .flag = "--host-memory",
     .deepspeed = "",
     .help = "Host RAM the planner places into, e.g. 64GiB (default: the usable memory detected)",
     .field = &TrainConfig::host_memory,
     .flag_text = FlagText::kByteSize,
     .show_default = false},
    {.name = "nvme_capacity",
     .json_key = "nvme_capacity",
     .flag = "--nvme-capacity",
     .deepspeed = "",
     .help = "NVMe space the planner places into, e.g. 1TiB (default: the NVMe paths' free space)",
     .field = &TrainConfig::nvme_capacity,
     .flag_text = FlagText::kByteSize,
     .show_default = false},
    {.name = "out_dir",
     .json_key = "out_dir",
     .flag = "--out",
     .deepspeed = "",
     .help = "Output directory (checkpoints, final model, metrics; default: ./tierflow-out)",
     .field = &TrainConfig::out_dir,
     .show_default = false},
    {.name = "checkpoint_every",
     .json_key = "checkpoint_every",
     .flag = "--checkpoint-every",
     .deepspeed = "",
     .help = "Steps between checkpoints (0 = at the end)",
     .field = &TrainConfig::checkpoint_every,
     .range = OptionRange{.min = 0, .wanted = "0 (only at the end) or more steps"}},
    {.name = "final_save",
     .json_key = "final_save",
     .flag = "--final-save",
     .deepspeed = "",
     .help = "What the run saves after its last step: all (a checkpoint and OUT/model), model, or "
             "none (a measurement)",
     .field = &TrainConfig::final_save},
    {.name = "resume",
     .json_key = "resume",
     .flag = "--resume",
     .deepspeed = "",
     .help = "Continue from the newest checkpoint under --out (an error when it does not verify)",
     .field = &TrainConfig::resume,
     .show_default = false},
    {.name = "resume_from",
     .json_key = "",
     .flag = "--resume-from",
     .deepspeed = "",
     .help = "Continue from this checkpoint directory (e.g. an older one when the newest does not "
             "verify)",
     .field = &TrainConfig::resume_from,
     .show_default = false},
    {.name = "metrics_path",
     .json_key = "metrics_path",
     .flag = "--metrics",
     .deepspeed = "",
     .help = "Metrics JSONL file (default: OUT/metrics.jsonl)",
     .field = &TrainConfig::metrics_path,
     .show_default = false},
    {.name = "trace_path",
     .json_key = "trace_path",
     .flag = "--trace",
     .deepspeed = "",
     .help = "Chrome trace file of the --trace-steps",
     .field = &TrainConfig::trace_path,
     .show_default = false},
    {.name = "trace_steps",
     .json_key = "trace_steps",
     .flag = "--trace-steps",
     .deepspeed = "",
     .help = "Steps to trace (default: 2)",
     .field = &TrainConfig::trace_steps,
     .range = OptionRange{.min = 1, .wanted = "1 or more"},
     .json_min = 1,
     .show_default = false},
    {.name = "log_every",
     .json_key = "log_every",
     .flag = "--log-every",
     .deepspeed = "",
     .help = "Steps between progress lines when not on a terminal",
     .field = &TrainConfig::log_every,
     .range = OptionRange{.min = 1, .wanted = "1 or more steps"}},
};

template <typename T>
inline constexpr bool kIsChoice = requires {
  ChoiceNames<T>::kTable;
};

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// Text forms of the field types, as a user would type them.
std::string Text(const std::string& v) { return v; }
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(DType v) { return std::string(DTypeName(v)); }
std::string Text(OffloadPlacement v) { return std::string(OffloadPlacementName(v)); }
std::string Text(ParamOffload v) { return std::string(ParamOffloadName(v)); }
std::string Text(const DeviceSpec& v) { return DeviceSpecName(v); }
template <typename T>
requires std::is_arithmetic_v<T> std::string Text(T v) {
  return std::is_floating_point_v<T> ? Number(static_cast<double>(v)) : std::to_string(v);
}
template <typename T>
requires kIsChoice<T> std::string Text(T v) { return std::string(ChoiceName(v)); }
template <typename T>
std::string Text(const std::optional<T>& v) {
  return v.has_value() ? Text(*v) : "auto";
}
template <typename T>
std::string Text(const std::vector<T>& v) {
  std::string out;
  for (const T& e : v) out += (out.empty() ? "" : ",") + Text(e);
  return out;
}

// A whole integer of type T, or an error saying what to write.
template <typename T>
StatusOr<T> ParseInteger(std::string_view text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError("'" + std::string(text) + "' is not an integer from " +
                                std::to_string(std::numeric_limits<T>::min()) + " to " +
                                std::to_string(std::numeric_limits<T>::max()));
  }
  return v;
}

StatusOr<double> ParseReal(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return InvalidArgumentError("'" + s + "' is not a finite number");
  }
  return v;
}

// The typed parsers: text -> the field's type. `flag_text` picks a count's
// or a size's reading.
template <typename T>
StatusOr<T> Parse(std::string_view where, std::string_view text, FlagText flag_text) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (flag_text == FlagText::kByteSize) {
      TF_ASSIGN_OR_RETURN(const uint64_t bytes, ParseByteSize(text));
      if (bytes == 0)
        return InvalidArgumentError("'" + std::string(text) + "' is 0 bytes; give a positive size");
    }
    return std::string(text);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (text == "true" || text == "false") return text == "true";
    return InvalidArgumentError("'" + std::string(text) + "' is not true or false");
  } else if constexpr (std::is_integral_v<T>) {
    if (flag_text == FlagText::kPlain) return ParseInteger<T>(text);
    TF_ASSIGN_OR_RETURN(const uint64_t n,
                        flag_text == FlagText::kCount ? ParseCount(text) : ParseByteSize(text));
    if (n > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return InvalidArgumentError("'" + std::string(text) + "' is more than " +
                                  std::to_string(std::numeric_limits<T>::max()));
    }
    return static_cast<T>(n);
  } else if constexpr (std::is_floating_point_v<T>) {
    TF_ASSIGN_OR_RETURN(const double v, ParseReal(text));
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, DType>) {
    return ParseDType(text);
  } else if constexpr (std::is_same_v<T, OffloadPlacement>) {
    return ParseOffloadPlacement(where, text);
  } else if constexpr (std::is_same_v<T, ParamOffload>) {
    return ParseParamOffload(where, text);
  } else if constexpr (std::is_same_v<T, DeviceSpec>) {
    return ParseDeviceSpec(where, text);
  } else if constexpr (kIsChoice<T>) {
    return ParseChoice<T>(text);
  } else {
    static_assert(sizeof(T) == 0, "a field type without a text form");
  }
}

template <typename T>
struct Unwrapped {
  using Type = T;
};
template <typename T>
struct Unwrapped<std::optional<T>> {
  using Type = T;
};

// `error` prefixed with `where` unless it already starts with it (the
// placement and device parsers name it themselves).
Status At(std::string_view where, const Status& error) {
  const std::string& m = error.message();
  if (m.rfind(std::string(where), 0) == 0) return error;
  return InvalidArgumentError(std::string(where) + ": " + m);
}

std::optional<double> NumberOf(const TrainOption& option, const TrainConfig& c) {
  return std::visit(
      [&](auto member) -> std::optional<double> {
        using T = std::remove_cvref_t<decltype(c.*member)>;
        using V = typename Unwrapped<T>::Type;
        if constexpr (!std::is_arithmetic_v<V> || std::is_same_v<V, bool>) {
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, V>) {
          return static_cast<double>(c.*member);
        } else {
          if (!(c.*member).has_value()) return std::nullopt;
          return static_cast<double>(*(c.*member));
        }
      },
      option.field);
}

std::string Cell(std::string_view text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

std::span<const TrainOption> TrainOptions() { return kRows; }

const TrainOption* FindTrainOptionByKey(std::string_view json_key) {
  for (const TrainOption& o : kRows) {
    if (!json_key.empty() && json_key == o.json_key) return &o;
  }
  return nullptr;
}

const TrainOption* FindTrainOptionByDeepSpeedKey(std::string_view block, std::string_view key) {
  if (key.empty() || key.find_first_of(".[") != std::string_view::npos) return nullptr;
  const std::string path =
      block.empty() ? std::string(key) : std::string(block) + "." + std::string(key);
  for (const TrainOption& o : kRows) {
    if (path == o.deepspeed) return &o;
  }
  return nullptr;
}

std::string OptionValueText(const TrainOption& option, const TrainConfig& config) {
  return std::visit([&](auto member) { return Text(config.*member); }, option.field);
}

Status SetOptionFromText(const TrainOption& option, std::string_view where, std::string_view text,
                         TrainConfig* config) {
  return std::visit(
      [&](auto member) -> Status {
        using T = std::remove_cvref_t<decltype(config->*member)>;
        using V = typename Unwrapped<T>::Type;
        if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                      std::is_same_v<T, std::vector<int64_t>>) {
          return InvalidArgumentError(std::string(where) + ": takes a list");
        } else {
          if constexpr (!std::is_same_v<T, V>) {
            if (text == "auto") {
              config->*member = std::nullopt;
              return Status::Ok();
            }
          }
          StatusOr<V> v = Parse<V>(where, text, option.flag_text);
          if (!v.ok()) return At(where, v.status());
          config->*member = *v;
          // The flag's rule over a config's (tierflow/sub_group_rule.h).
          if (option.field == OptionField(&TrainConfig::sub_group_size)) {
            config->sub_group_cut = SubGroupCut::kSlices;
          }
          return Status::Ok();
        }
      },
      option.field);
}

std::optional<std::string> OptionRangeError(const TrainOption& option, const TrainConfig& config) {
  if (!option.range.has_value()) return std::nullopt;
  const std::optional<double> v = NumberOf(option, config);
  if (!v.has_value()) return std::nullopt;
  const OptionRange& r = *option.range;
  const bool above_min = r.min_open ? *v > r.min : *v >= r.min;
  const bool below_max = r.max_open ? *v < r.max : *v <= r.max;
  if (above_min && below_max) return std::nullopt;  // NaN fails both
  return "is " + OptionValueText(option, config) + "; use " + r.wanted;
}

std::string TrainOptionsMarkdown() {
  const TrainConfig defaults;
  std::string out =
      "| key | flag | default | values | DeepSpeed key | meaning |\n"
      "|---|---|---|---|---|---|\n";
  auto code = [](std::string_view s) { return s.empty() ? std::string() : "`" + Cell(s) + "`"; };
  for (const TrainOption& o : kRows) {
    const std::string value = o.show_default ? OptionValueText(o, defaults) : "";
    const std::string values = o.range.has_value() ? Cell(o.range->wanted) : "";
    out += "| " + code(o.json_key) + " | " + code(o.flag) + " | " + code(value) + " | " + values +
           " | " + code(o.deepspeed) + " | " + Cell(o.help) + " |\n";
  }
  return out;
}

}  // namespace tierflow

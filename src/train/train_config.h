// Everything `tierflow train` is told: from command-line flags and/or a JSON
// config file that may use DeepSpeed's keys (so existing configs work).
//
// Precedence: built-in defaults < --config FILE < explicit command-line flags.
// Unknown keys in the file are warned about by name (collected in
// `warnings`); contradictory settings are errors naming both.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/activation_offload.h"
#include "common/grad_offload.h"
#include "tierflow/device_choice.h"
#include "tierflow/dtype.h"
#include "tierflow/param_offload.h"
#include "tierflow/placement.h"
#include "tierflow/status.h"
#include "tierflow/sub_group_rule.h"
#include "train/train_choices.h"

namespace tierflow {

struct LrScheduleConfig {
  // constant, WarmupLR, WarmupDecayLR, WarmupCosineLR (DeepSpeed's names).
  LrScheduleType type = LrScheduleType::kConstant;
  float warmup_min_lr = 0.0f;   // WarmupLR/WarmupDecayLR: warmup_min_lr
  float warmup_max_lr = -1.0f;  // <0: the optimizer's lr
  int64_t warmup_num_steps = 0;
  WarmupType warmup_type = WarmupType::kLog;  // log | linear (DeepSpeed default: log)
  int64_t total_num_steps = 0;                // WarmupDecayLR / WarmupCosineLR; 0: the run's steps
  float cos_min_ratio = 0.0001f;              // WarmupCosineLR: lr floor as a ratio of max
  float warmup_min_ratio = 0.0f;              // WarmupCosineLR: start of warmup as a ratio of max
};

struct TrainConfig {
  // Model and data.
  std::string model = "small-llama";  // preset name or HF directory (3.0M params)
  // A Hugging Face directory whose safetensors hold tensors its config.json
  // does not use (model/hf_model.h, UnusedHfTensors): train the ones it uses
  // and name the rest in the log, instead of refusing. Only with weights.
  bool allow_unused_tensors = false;
  std::string data;  // text/JSONL/token file; "" = the bundled corpus
  TrainTokenDtype token_dtype = TrainTokenDtype::kNone;  // "" (text) | u16 | u32
  std::string text_field = "text";                       // JSONL field
  // "" = by file name (text, JSONL, tokens); or text | jsonl | tokens |
  // prompt-completion | alpaca | chat (instruction data, data/instruction_data.h)
  TrainDataFormat data_format = TrainDataFormat::kByFileName;
  // "" = the tokenizer's; llama3 | chatml | llama2 | mistral
  TrainChatTemplate chat_template = TrainChatTemplate::kTokenizers;
  // Instruction samples over seq_len: truncate | drop.
  Truncation truncation = Truncation::kTruncate;
  bool packing = false;   // instruction data: several samples per sequence
  std::string tokenizer;  // "" = the model's (dir) or bytes (presets)
  bool shuffle = true;
  uint64_t seed = 1234;
  double eval_fraction = 0.05;  // held-out share of the data
  int64_t eval_every = 50;      // steps between eval losses; 0 = never
  int eval_batches = 4;
  // Instruction data: the longest JSONL line (one sample) accepted, in bytes,
  // 1 to 1 GiB (InstructionOptions::max_sample_bytes). Default: 16 MiB.
  uint64_t max_sample_bytes = uint64_t{16} << 20;

  // Batch.
  int micro_batch = 4;  // train_micro_batch_size_per_gpu
  int grad_accum = 1;   // gradient_accumulation_steps
  int seq_len = 128;
  int64_t steps = 300;
  bool activation_checkpointing = false;
  // Where the checkpoints live (tierflow.offload_activations,
  // --offload-activations): auto lets the planner choose; host needs
  // activation_checkpointing.
  ActivationOffload offload_activations = ActivationOffload::kAuto;
  // Where the step's gradients wait for its decision
  // (tierflow.offload_gradients, --offload-gradients): auto lets the
  // planner choose; nvme needs the optimizer state wholly on NVMe and one
  // process.
  GradOffload offload_gradients = GradOffload::kAuto;
  // tierflow.mlp_tile_rows / --mlp-tile-rows: the MLP in row tiles of this
  // many rows (a multiple of 256; 0 untiled). Unset: the planner's choice.
  std::optional<uint64_t> mlp_tile_rows;

  // Precision.
  DType dtype = DType::kBF16;  // from bf16/fp16 "enabled" (neither: fp32)
  // What gradients cross PCIe in (tierflow/grad_transfer.h): unset = the
  // dtype when 16-bit, fp32 for fp32; fp16 needs fp16 weights.
  std::optional<DType> grad_transfer_dtype;
  float loss_scale = 0.0f;  // fp16: 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  float min_loss_scale = 1.0f;

  // Optimizer.
  TrainOptimizer optimizer = TrainOptimizer::kAdamW;  // adamw | adam
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // optimizer.params.bias_correction: Adam's moments divided by (1 - beta^t).
  bool bias_correction = true;
  float gradient_clipping = 1.0f;  // 0 = off
  LrScheduleConfig scheduler;

  // Offload.
  // kAuto | kHost | kNvme (offload_optimizer.device; "cpu" = host). kAuto,
  // the default: the planner's placement (plan/planner.h): host RAM when the
  // state fits there, else the smallest share on NVMe that lets it.
  OffloadPlacement offload = OffloadPlacement::kAuto;
  // Parameter offload (zero_optimization.offload_param.device, tierflow.offload_param,
  // --offload-param): kAuto, the default, streams the weights of some units
  // from host or NVMe only when the all-resident device does not fit (the
  // planner chooses which, how many slots, and where the copy lives); kNone
  // keeps every weight on the device; kHost / kNvme stream from there.
  ParamOffload offload_param = ParamOffload::kAuto;
  // tierflow.param_slots / --param-slots: device slots of the streamed
  // weights' ring (>= 2); unset: the planner's choice.
  std::optional<int> param_slots;
  std::vector<std::string> nvme_paths;  // "" = a temporary directory, removed at exit
  bool nvme_buffered = false;
  // tierflow.nvme_ratio, with kNvme only (kAuto chooses its own share).
  double nvme_ratio = 1.0;
  // tierflow.buffer_count: NVMe I/O slots and weight staging slots;
  // 0 = not given: 4, or more when the NVMe settings (profile) want more
  // transfers in flight (in_flight + 2: one held by the optimizer, one free).
  int buffer_count = 0;
  // Sub-groups (tierflow/sub_group_rule.h): tierflow.sub_group_size and
  // --sub-group-size cut slices of at most this many parameters (>= 1);
  // zero_optimization.sub_group_size at stage 3 means DeepSpeed's rule,
  // whole tensors of at least this many (0: one tensor each).
  uint64_t sub_group_size = 4u << 20;
  SubGroupCut sub_group_cut = SubGroupCut::kSlices;
  // offload_optimizer.pin_memory: page-lock the host-tier optimizer state
  // (EngineOptions::lock_host_state). DMA buffers are pinned either way.
  bool pin_memory = false;
  // The NVMe store's I/O (tierflow/nvme_io.h). Given, each overrides the
  // profile's value and the start-up probe's; 0 = not given.
  uint32_t aio_block_size = 0;   // aio.block_size
  uint32_t aio_queue_depth = 0;  // aio.queue_depth
  uint32_t aio_threads = 0;      // aio.thread_count / aio.intra_op_parallelism: io_uring rings
  // Hardware profile (`tierflow bench all` / `bench nvme --tune --profile`):
  // its nvme_store settings build the NVMe tier and its rates feed the
  // planner's prediction. "" = none: a start-up probe picks the NVMe settings.
  std::string profile;
  TrainPipeline pipeline = TrainPipeline::kOverlapped;  // overlapped | sync
  // Several ranks (tierflow.collectives, --collectives): where the gradient
  // is summed and the weights gathered. "device": on the devices (NCCL on
  // GPUs; MPI over the CPU device's memory), only each rank's part crossing
  // PCIe; "host": on the host (MPI), every rank landing the whole gradient;
  // "auto": device where NCCL serves it (a CUDA device in a build with
  // NCCL), else host.
  TrainCollectives collectives = TrainCollectives::kAuto;
  // Overlapped pipeline: parameters updated speculatively per step; unset =
  // as many as the host memory the planner leaves free allows.
  std::optional<uint64_t> speculation_params;
  // tierflow.grad_bucket_params / --grad-bucket: parameters per gradient
  // bucket (EngineOptions::grad_bucket_params). Unset: the planner's choice.
  std::optional<uint64_t> grad_bucket_params;

  // Device.
  DeviceSpec device;          // auto, cpu, cuda or sim:PROFILE
  std::string device_memory;  // e.g. "2GiB"
  // The machine the planner may place into (tierflow.host_memory,
  // --host-memory; tierflow.nvme_capacity, --nvme-capacity), e.g. "64GiB":
  // this much host RAM / NVMe space instead of what the machine reports
  // (usable memory; the NVMe paths' free space), e.g. to leave room for other
  // work. "" = what the machine reports.
  std::string host_memory;
  std::string nvme_capacity;

  // Output.
  std::string out_dir;             // checkpoints and the final model; "" = ./tierflow-out
  int64_t checkpoint_every = 100;  // steps; 0 = only at the end
  // What the run saves when its last step is done: "all" (a checkpoint and
  // OUT/model), "model" (OUT/model alone), "none" (nothing: a measurement,
  // e.g. gpu-check's 3B run, whose state would fill the disk). A stop
  // request's checkpoint and --checkpoint-every's are saved whatever it says.
  FinalSave final_save = FinalSave::kAll;
  bool resume = false;
  // A checkpoint directory to resume from explicitly (--resume-from), e.g. an
  // older one when the newest does not verify; "" = --resume's newest.
  std::string resume_from;
  std::string metrics_path;          // JSONL; "" = <out>/metrics.jsonl
  std::string trace_path;            // Chrome trace of trace_steps
  std::vector<int64_t> trace_steps;  // default: {2}
  int64_t log_every = 10;

  std::vector<std::string> warnings;  // unknown keys, ignored settings
  // Where each setting given was set, by the setting's name as
  // ValidateTrainConfig's errors name it ("lr", "scheduler.warmup_min_lr"):
  // "FILE: json.path" for a config key, "--flag" for a command-line flag.
  // Settings left at their defaults are absent.
  std::map<std::string, std::string> origins;
};

// Reads a JSON config (tierflow's own keys and DeepSpeed's) on top of `base`.
// Errors: NotFound (file), InvalidArgument naming the file and key for bad
// types/values and for contradictions (bf16 and fp16 both enabled, ...).
// Mapping notes (DeepSpeed semantics, one GPU):
//  - "auto" keeps the value from `base` (noted in `warnings`); for
//    scheduler.params.warmup_max_lr it means the optimizer's lr (-1) and for
//    total_num_steps the run's steps (0).
//  - train_batch_size = micro * accum; any two determine the third.
//  - optimizer.type "Adam" is AdamW unless params.adam_w_mode is false
//    (DeepSpeed's ADAM_W_MODE_DEFAULT = true); only Adam/AdamW are accepted.
//  - A scheduler block gets DeepSpeed's constructor defaults for keys it
//    omits (warmup_max_lr 0.001, warmup_num_steps 1000, warmup_type log,
//    cos_min_ratio 0.0001).
//  - zero_optimization.stage 0 plus an offload device is a contradiction;
//    stage 0 alone and stage 3 are warnings (tierflow offloads like stage 2).
//  - offload_optimizer.device cpu|none -> "host", nvme -> "nvme".
//  - tierflow.<field> keys use TrainConfig's field names; one that disagrees
//    with the DeepSpeed key for the same field is a contradiction.
// Warnings are prefixed with the label and name the key's JSON path.
// `world_size`: the data-parallel ranks, for DeepSpeed's batch rule
// train_batch_size = micro * accumulation * world_size.
StatusOr<TrainConfig> LoadTrainConfig(const std::string& path, const TrainConfig& base,
                                      int world_size = 1);
// Same, from JSON text; `label` names it in errors.
StatusOr<TrainConfig> ParseTrainConfig(std::string_view json_text, const std::string& label,
                                       const TrainConfig& base, int world_size = 1);

// Checks ranges and combinations after flags are applied. Errors:
// InvalidArgument "WHERE: what is wrong; what to use", WHERE being the
// setting's origin ("ds.json: optimizer.params.lr", "--lr") when
// config.origins has one, else the setting's name.
Status ValidateTrainConfig(const TrainConfig& config);

// The learning rate of optimizer step `step` (1-based) under the schedule:
// DeepSpeed's formula at its last_batch_iteration = step - 1 (see
// lr_schedule.cc), with base lr = config.lr. Past total_num_steps,
// WarmupCosineLR holds cos_min_ratio, as DeepSpeed's does.
// REQUIRES: ValidateTrainConfig(config).ok().
float ScheduledLr(const TrainConfig& config, int64_t step);

// What a valid schedule does that its user may not expect, as DeepSpeed
// warns about it: a total_num_steps at or below the warmup (after the
// warmup, WarmupDecayLR's rate is 0 and WarmupCosineLR's its floor).
// Empty when there is nothing to say.
std::vector<std::string> ScheduleNotes(const TrainConfig& config);

}  // namespace tierflow

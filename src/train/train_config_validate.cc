// Range and combination checks on a TrainConfig after the config file and
// command-line flags are applied. Each error names where the setting was
// given (the config file and its JSON path, or the flag; else the setting:
// the TrainConfig field, which is also the tierflow.* key) and says what to
// do.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "common/units.h"
#include "tierflow/grad_transfer.h"
#include "tierflow/nvme_io.h"
#include "train/train_config.h"

namespace tierflow {
namespace {

// "WHERE: what": the setting's origin (the config file and JSON path, or the
// flag) when it was given, so the user can find it; else its name.
std::string Where(const TrainConfig& c, const std::string& setting) {
  const auto it = c.origins.find(setting);
  return it == c.origins.end() ? setting : it->second;
}

Status BadSetting(const TrainConfig& c, const std::string& setting, const std::string& what) {
  return InvalidArgumentError(Where(c, setting) + ": " + what);
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

Status ValidateSchedule(const TrainConfig& c) {
  const auto Bad = [&c](const std::string& setting, const std::string& what) {
    return BadSetting(c, setting, what);
  };
  const LrScheduleConfig& s = c.scheduler;
  if (s.type == LrScheduleType::kConstant) return Status::Ok();
  if (s.warmup_num_steps < 0) {
    return Bad("scheduler.warmup_num_steps",
               "is " + std::to_string(s.warmup_num_steps) + "; use 0 or more");
  }
  if (s.type == LrScheduleType::kWarmupCosineLR) {
    if (!(s.warmup_min_ratio >= 0.0f && s.warmup_min_ratio <= 1.0f)) {
      return Bad("scheduler.warmup_min_ratio",
                 "is " + Num(s.warmup_min_ratio) + "; use a ratio in [0, 1]");
    }
    if (!(s.cos_min_ratio >= 0.0f && s.cos_min_ratio <= 1.0f)) {
      return Bad("scheduler.cos_min_ratio",
                 "is " + Num(s.cos_min_ratio) + "; use a ratio in [0, 1]");
    }
    // A total at or below the warmup is DeepSpeed's too: every step after
    // the warmup is at cos_min_ratio (ScheduleNotes says so at start-up).
  } else {
    if (!std::isfinite(s.warmup_min_lr) || s.warmup_min_lr < 0.0f) {
      return Bad("scheduler.warmup_min_lr", "is " + Num(s.warmup_min_lr) + "; use 0 or more");
    }
    const float max_lr = s.warmup_max_lr < 0.0f ? c.lr : s.warmup_max_lr;
    if (!std::isfinite(s.warmup_max_lr) || max_lr <= 0.0f) {
      return Bad(
          "scheduler.warmup_max_lr",
          "is " + Num(s.warmup_max_lr) + "; use a positive rate (or leave it out to use lr)");
    }
  }
  if (s.type != LrScheduleType::kWarmupLR && s.total_num_steps < 0) {
    return Bad("scheduler.total_num_steps", "is negative; use 0 (the run's steps) or more");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTrainConfig(const TrainConfig& c) {
  const auto Bad = [&c](const std::string& setting, const std::string& what) {
    return BadSetting(c, setting, what);
  };
  if (c.model.empty()) return Bad("model", "is empty; name a preset or a model directory");
  for (const auto& [setting, text, least] :
       {std::tuple<const char*, const std::string&, uint64_t>{"host_memory", c.host_memory, 1},
        {"nvme_capacity", c.nvme_capacity, 0}}) {
    if (text.empty()) continue;
    StatusOr<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok() || *bytes < least) {
      return Bad(setting, "'" + text + "' is not a byte size" + (least > 0 ? " above 0" : "") +
                              " (e.g. 64GiB); leave it out to use what the machine reports");
    }
  }
  if (c.param_slots.has_value() && (*c.param_slots < 2 || *c.param_slots > 64)) {
    return Bad("param_slots", "is " + std::to_string(*c.param_slots) +
                                  "; the streamed weights' ring needs 2 to 64 device slots "
                                  "(--param-slots)");
  }
  const bool instruction = IsInstructionFormat(c.data_format);
  // Instruction-only settings with other data would be accepted and ignored.
  if (!instruction && c.chat_template != TrainChatTemplate::kTokenizers) {
    return Bad("chat_template",
               "applies to instruction data only; set data_format to "
               "prompt-completion, alpaca or chat");
  }
  if (!instruction && c.packing) {
    return Bad("packing",
               "applies to instruction data only (text is always cut into full sequences); set "
               "data_format to prompt-completion, alpaca or chat");
  }
  if (!instruction && c.truncation != Truncation::kTruncate) {
    return Bad("truncation",
               "applies to instruction data only; set data_format to "
               "prompt-completion, alpaca or chat");
  }
  // data's kMaxSampleBytesLimit (train_config_test ties them).
  if (c.max_sample_bytes < 1 || c.max_sample_bytes > (uint64_t{1} << 30)) {
    return Bad("max_sample_bytes", "is " + std::to_string(c.max_sample_bytes) +
                                       " (--max-sample-bytes); use 1 byte to 1GiB");
  }
  if (!instruction && c.max_sample_bytes != TrainConfig().max_sample_bytes) {
    return Bad("max_sample_bytes",
               "applies to instruction data only (text is tokenized whole); set data_format to "
               "prompt-completion, alpaca or chat");
  }
  if (instruction && c.token_dtype != TrainTokenDtype::kNone) {
    return Bad("token_dtype", "is for pre-tokenized files; instruction data is JSONL text");
  }
  if (!(c.eval_fraction >= 0.0 && c.eval_fraction < 1.0)) {
    return Bad("eval_fraction", "is " + Num(c.eval_fraction) + "; use a fraction in [0, 1)");
  }
  if (c.eval_every < 0) return Bad("eval_every", "is negative; use 0 (never) or more");
  if (c.eval_every > 0 && c.eval_batches < 1) {
    return Bad("eval_batches", "is " + std::to_string(c.eval_batches) + "; use 1 or more");
  }

  if (c.micro_batch < 1) {
    return Bad("micro_batch", "is " + std::to_string(c.micro_batch) +
                                  " (train_micro_batch_size_per_gpu); use 1 or more");
  }
  if (c.grad_accum < 1) {
    return Bad("grad_accum", "is " + std::to_string(c.grad_accum) +
                                 " (gradient_accumulation_steps); use 1 or more");
  }
  if (c.seq_len < 2) {
    return Bad("seq_len", "is " + std::to_string(c.seq_len) +
                              "; use 2 or more (one input and one target token)");
  }
  if (c.steps < 1) return Bad("steps", "is " + std::to_string(c.steps) + "; use 1 or more");

  if (c.dtype == DType::kF16) {
    if (!std::isfinite(c.loss_scale) || c.loss_scale < 0.0f) {
      return Bad("loss_scale",
                 "is " + Num(c.loss_scale) + "; use 0 (dynamic) or a positive static scale");
    }
    if (c.initial_scale_power < 0 || c.initial_scale_power > 63) {
      return Bad("initial_scale_power", "is " + std::to_string(c.initial_scale_power) +
                                            "; use 0..63 (the scale starts at 2^power)");
    }
    if (c.loss_scale_window < 1) {
      return Bad("loss_scale_window",
                 "is " + std::to_string(c.loss_scale_window) + "; use 1 or more steps");
    }
    if (c.hysteresis < 1) {
      return Bad("hysteresis", "is " + std::to_string(c.hysteresis) + "; use 1 or more");
    }
    if (!std::isfinite(c.min_loss_scale) || c.min_loss_scale <= 0.0f) {
      return Bad("min_loss_scale", "is " + Num(c.min_loss_scale) + "; use a positive scale");
    }
    if (c.loss_scale == 0.0f && std::ldexp(1.0, c.initial_scale_power) < c.min_loss_scale) {
      return Bad("min_loss_scale", Num(c.min_loss_scale) + " is above the initial scale 2^" +
                                       std::to_string(c.initial_scale_power) +
                                       "; lower it or raise initial_scale_power");
    }
  }

  if (!std::isfinite(c.lr) || c.lr <= 0.0f) {
    return Bad("lr", "is " + Num(c.lr) + "; use a positive, finite learning rate");
  }
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) {
    return Bad("beta1", "is " + Num(c.beta1) + "; use a value in [0, 1) (e.g. 0.9)");
  }
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) {
    return Bad("beta2", "is " + Num(c.beta2) + "; use a value in [0, 1) (e.g. 0.999)");
  }
  if (!std::isfinite(c.eps) || c.eps < 0.0f) {
    return Bad("eps", "is " + Num(c.eps) + "; use 0 or a small positive value (e.g. 1e-8)");
  }
  if (!std::isfinite(c.weight_decay) || c.weight_decay < 0.0f) {
    return Bad("weight_decay", "is " + Num(c.weight_decay) + "; use 0 or more");
  }
  if (!std::isfinite(c.gradient_clipping) || c.gradient_clipping < 0.0f) {
    return Bad("gradient_clipping",
               "is " + Num(c.gradient_clipping) + "; use 0 (off) or a positive max norm");
  }
  TF_RETURN_IF_ERROR(ValidateSchedule(c));

  if (c.offload != OffloadPlacement::kHost && c.offload != OffloadPlacement::kNvme &&
      c.offload != OffloadPlacement::kAuto) {
    return Bad("offload", "'" + std::string(OffloadPlacementName(c.offload)) +
                              "' is not valid; use auto, host or nvme");
  }
  for (const std::string& p : c.nvme_paths) {
    if (p.empty()) return Bad("nvme_paths", "contains an empty path; name a directory");
  }
  if (!(c.nvme_ratio >= 0.0 && c.nvme_ratio <= 1.0)) {
    return Bad("nvme_ratio",
               "is " + Num(c.nvme_ratio) + " (tierflow.nvme_ratio); use a fraction in [0, 1]");
  }
  if (c.nvme_ratio != 1.0 && c.offload != OffloadPlacement::kNvme) {
    return Bad("nvme_ratio", "is " + Num(c.nvme_ratio) +
                                 " (tierflow.nvme_ratio), which splits state placed on NVMe, "
                                 "but the placement is " +
                                 std::string(OffloadPlacementName(c.offload)) +
                                 "; set offload nvme (offload_optimizer.device) to fix the "
                                 "split, or drop the ratio and let the planner choose");
  }
  if (c.buffer_count != 0 && c.buffer_count < 2) {
    return Bad("buffer_count", "is " + std::to_string(c.buffer_count) +
                                   " (tierflow.buffer_count); use 2 or more so one "
                                   "sub-group can load while another computes");
  }
  if (c.sub_group_size < 1 && c.sub_group_cut == SubGroupCut::kSlices) {
    return Bad("sub_group_size",
               "is 0 (tierflow.sub_group_size, --sub-group-size); use 1 or "
               "more (DeepSpeed's zero_optimization.sub_group_size 0, one "
               "tensor per sub-group, applies at stage 3)");
  }
  // 0 = not given (the profile or the start-up probe decides).
  if (c.aio_block_size != 0 &&
      (c.aio_block_size % 4096 != 0 || c.aio_block_size > kNvmeIoMaxBlockBytes)) {
    return Bad("aio_block_size", "is " + std::to_string(c.aio_block_size) +
                                     " (aio.block_size); use a multiple of 4096 (O_DIRECT "
                                     "alignment) up to 268435456 (256 MiB), e.g. 16777216");
  }
  if (c.aio_queue_depth > kNvmeIoMaxQueueDepth) {
    return Bad("aio_queue_depth",
               "is " + std::to_string(c.aio_queue_depth) + " (aio.queue_depth); use 1..4096");
  }
  if (c.aio_threads > kNvmeIoMaxRings) {
    return Bad("aio_threads", "is " + std::to_string(c.aio_threads) +
                                  " (aio.thread_count); use 1..64 io_uring rings");
  }
  if (c.grad_bucket_params.has_value() &&
      (*c.grad_bucket_params < 1 || *c.grad_bucket_params > (uint64_t{1} << 40))) {
    return Bad("grad_bucket_params", "is " + std::to_string(*c.grad_bucket_params) +
                                         " (tierflow.grad_bucket_params); use 1 to 2^40 "
                                         "parameters, or leave it to the planner");
  }
  if (c.speculation_params.has_value() && *c.speculation_params > (uint64_t{1} << 40)) {
    return Bad("speculation_params",
               "is " + std::to_string(*c.speculation_params) +
                   ", more than 2^40 parameters; any value at or above the model's parameter "
                   "count speculates on all of it");
  }
  if (c.speculation_params.has_value() && c.pipeline == TrainPipeline::kSync) {
    return Bad("speculation_params",
               "is set but the sync pipeline does not speculate; drop it or use the overlapped "
               "pipeline");
  }
  TF_RETURN_IF_ERROR(ValidateGradTransferDType(Where(c, "grad_transfer_dtype"), c.dtype,
                                               GradTransferDType(c.dtype, c.grad_transfer_dtype)));

  if (c.checkpoint_every < 0) {
    return Bad("checkpoint_every", "is negative; use 0 (only at the end) or more steps");
  }
  if (c.log_every < 1)
    return Bad("log_every", "is " + std::to_string(c.log_every) + "; use 1 or more steps");
  for (int64_t s : c.trace_steps) {
    if (s < 1 || s > c.steps) {
      return Bad("trace_steps", "step " + std::to_string(s) + " is outside the run (1.." +
                                    std::to_string(c.steps) + "); list steps the run reaches");
    }
  }
  return Status::Ok();
}

}  // namespace tierflow

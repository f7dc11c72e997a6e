// Range and combination checks on a TrainConfig after the config file and
// command-line flags are applied. Each error names where the setting was
// given (the config file and its JSON path, or the flag; else the setting:
// the TrainConfig field, which is also the tierflow.* key) and says what to
// do.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "common/units.h"
#include "tierflow/grad_transfer.h"
#include "tierflow/nvme_io.h"
#include "train/train_config.h"
#include "train/train_options.h"

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

// The data settings that apply to instruction data only, or to other data.
Status ValidateData(const TrainConfig& c) {
  const auto Bad = [&c](const std::string& setting, const std::string& what) {
    return BadSetting(c, setting, what);
  };
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
  if (!instruction && c.max_sample_bytes != TrainConfig().max_sample_bytes) {
    return Bad("max_sample_bytes",
               "applies to instruction data only (text is tokenized whole); set data_format to "
               "prompt-completion, alpaca or chat");
  }
  if (instruction && c.token_dtype != TrainTokenDtype::kNone) {
    return Bad("token_dtype", "is for pre-tokenized files; instruction data is JSONL text");
  }
  if (c.eval_every > 0 && c.eval_batches < 1) {
    return Bad("eval_batches", "is " + std::to_string(c.eval_batches) + "; use 1 or more");
  }
  return Status::Ok();
}

// fp16's loss scaler (the other dtypes do not read it).
Status ValidateLossScaler(const TrainConfig& c) {
  const auto Bad = [&c](const std::string& setting, const std::string& what) {
    return BadSetting(c, setting, what);
  };
  if (c.dtype != DType::kF16) return Status::Ok();
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
  return Status::Ok();
}

}  // namespace

Status ValidateTrainConfig(const TrainConfig& c) {
  const auto Bad = [&c](const std::string& setting, const std::string& what) {
    return BadSetting(c, setting, what);
  };
  if (c.model.empty()) return Bad("model", "is empty; name a preset or a model directory");
  for (const auto& [setting, text] :
       {std::pair<const char*, const std::string&>{"host_memory", c.host_memory},
        {"nvme_capacity", c.nvme_capacity}}) {
    if (text.empty()) continue;
    StatusOr<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok() || *bytes == 0) {
      return Bad(setting, "'" + text +
                              "' is not a byte size above 0 (e.g. 64GiB); leave it out to use what "
                              "the machine reports");
    }
  }
  // Each option's own range (train/train_options.h), then the combinations.
  for (const TrainOption& option : TrainOptions()) {
    if (std::optional<std::string> error = OptionRangeError(option, c)) {
      return Bad(option.name, *error);
    }
  }
  TF_RETURN_IF_ERROR(ValidateData(c));
  TF_RETURN_IF_ERROR(ValidateLossScaler(c));
  TF_RETURN_IF_ERROR(ValidateSchedule(c));

  if (c.offload != OffloadPlacement::kHost && c.offload != OffloadPlacement::kNvme &&
      c.offload != OffloadPlacement::kAuto) {
    return Bad("offload", "'" + std::string(OffloadPlacementName(c.offload)) +
                              "' is not valid; use auto, host or nvme");
  }
  for (const std::string& p : c.nvme_paths) {
    if (p.empty()) return Bad("nvme_paths", "contains an empty path; name a directory");
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
  if (c.speculation_params.has_value() && c.pipeline == TrainPipeline::kSync) {
    return Bad("speculation_params",
               "is set but the sync pipeline does not speculate; drop it or use the overlapped "
               "pipeline");
  }
  TF_RETURN_IF_ERROR(ValidateGradTransferDType(Where(c, "grad_transfer_dtype"), c.dtype,
                                               GradTransferDType(c.dtype, c.grad_transfer_dtype)));

  for (int64_t s : c.trace_steps) {
    if (s < 1 || s > c.steps) {
      return Bad("trace_steps", "step " + std::to_string(s) + " is outside the run (1.." +
                                    std::to_string(c.steps) + "); list steps the run reaches");
    }
  }
  return Status::Ok();
}

}  // namespace tierflow

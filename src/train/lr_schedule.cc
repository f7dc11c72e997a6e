// The learning rate of each optimizer step under DeepSpeed's schedules
// (deepspeed/runtime/lr_schedules.py: WarmupLR, WarmupDecayLR,
// WarmupCosineLR), so a DeepSpeed config trains with the same curve.
//
// Step mapping: DeepSpeed's engine calls scheduler.step() after every
// optimizer step, and the scheduler starts at last_batch_iteration = -1, so
// tierflow's 1-based optimizer step `s` runs at DeepSpeed's iteration
// i = s - 1. As in DeepSpeed, warmup_num_steps is raised to at least 2 (so
// log(W) is never 0). With W = max(2, warmup_num_steps), T = total_num_steps:
//   warmup gamma (i < W): log:    log(i + 1) / log(W)
//                         linear: i / W
//   WarmupLR:       lr = min_lr + (max_lr - min_lr) * (i < W ? gamma : 1)
//   WarmupDecayLR:  lr = min_lr + (max_lr - min_lr) *
//                        (i < W ? gamma : max(0, (T - i) / max(1, T - W)))
//   WarmupCosineLR: lr = base_lr * ratio, where
//                   ratio = i < W ? wmr + (1 - wmr) * gamma
//                         : max(0, cmr + (1 - cmr) * (1 + cos(pi * (i - W + 1) / (T - W))) / 2)
// Past T the cosine's progress is clamped to 1 (the rate stays at
// cos_min_ratio), as in DeepSpeed since it stopped letting the rate climb
// again; a T at or below W is accepted, as DeepSpeed accepts it with a
// warning (ScheduleNotes).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace tierflow {
namespace {

double WarmupGamma(const LrScheduleConfig& s, int64_t iteration, int64_t warmup_steps) {
  if (s.warmup_type == WarmupType::kLinear) {
    return static_cast<double>(iteration) / static_cast<double>(warmup_steps);
  }
  return std::log(static_cast<double>(iteration + 1)) / std::log(static_cast<double>(warmup_steps));
}

}  // namespace

float ScheduledLr(const TrainConfig& config, int64_t step) {
  const LrScheduleConfig& s = config.scheduler;
  const double base_lr = config.lr;
  if (s.type == LrScheduleType::kConstant) return config.lr;
  const int64_t iteration = std::max<int64_t>(step - 1, 0);
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  const int64_t total = s.total_num_steps > 0 ? s.total_num_steps : config.steps;
  const bool warming = iteration < warmup;

  if (s.type == LrScheduleType::kWarmupCosineLR) {
    double ratio;
    if (warming) {
      ratio = s.warmup_min_ratio + (1.0 - s.warmup_min_ratio) * WarmupGamma(s, iteration, warmup);
    } else {
      const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
      const double done = std::min(static_cast<double>(iteration - warmup + 1), span);
      const double cosine = (1.0 + std::cos(std::numbers::pi * done / span)) / 2.0;
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
    }
    return static_cast<float>(base_lr * ratio);
  }

  const double min_lr = s.warmup_min_lr;
  const double max_lr = s.warmup_max_lr < 0.0f ? base_lr : s.warmup_max_lr;
  double gamma = 1.0;
  if (warming) {
    gamma = WarmupGamma(s, iteration, warmup);
  } else if (s.type == LrScheduleType::kWarmupDecayLR) {
    gamma = std::max(0.0, static_cast<double>(total - iteration) /
                              static_cast<double>(std::max<int64_t>(1, total - warmup)));
  }
  return static_cast<float>(min_lr + (max_lr - min_lr) * gamma);
}

std::vector<std::string> ScheduleNotes(const TrainConfig& config) {
  const LrScheduleConfig& s = config.scheduler;
  std::vector<std::string> notes;
  if (s.type != LrScheduleType::kWarmupDecayLR && s.type != LrScheduleType::kWarmupCosineLR) {
    return notes;
  }
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  const int64_t total = s.total_num_steps > 0 ? s.total_num_steps : config.steps;
  if (total <= warmup) {
    notes.push_back("scheduler: total_num_steps " + std::to_string(total) +
                    " is not more than the warmup (" + std::to_string(warmup) + "): after it, " +
                    (s.type == LrScheduleType::kWarmupDecayLR
                         ? std::string("the rate is warmup_min_lr")
                         : std::string("the rate stays at cos_min_ratio")) +
                    ", as in DeepSpeed");
  }
  return notes;
}

}  // namespace tierflow

// ScheduledLr against values worked out by hand from DeepSpeed's formulas
// (deepspeed/runtime/lr_schedules.py), at the start, inside warmup, at the
// end of warmup, during decay and past the end, for each schedule type.
#include <cmath>

#include <gtest/gtest.h>

#include "train/train_config.h"

namespace tierflow {
namespace {

// Float results against double hand values: relative tolerance of a few float ulps.
void ExpectLr(const TrainConfig& c, int64_t step, double expected) {
  float got = ScheduledLr(c, step);
  EXPECT_NEAR(got, expected, 1e-12 + std::fabs(expected) * 4e-7) << "step " << step;
}

TEST(LrSchedule, ConstantIsTheOptimizerLr) {
  TrainConfig c;
  c.lr = 3e-4f;
  ExpectLr(c, 1, 3e-4);
  ExpectLr(c, 1000, 3e-4);
}

TEST(LrSchedule, WarmupLrLogRisesAsLogOfIterationThenHolds) {
  TrainConfig c;
  c.scheduler.type = LrScheduleType::kWarmupLR;
  c.scheduler.warmup_min_lr = 1e-4f;
  c.scheduler.warmup_max_lr = 1e-3f;
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.warmup_type = WarmupType::kLog;
  // Step s runs at DeepSpeed iteration i = s - 1: gamma = log(i + 1) / log(10).
  ExpectLr(c, 1, 1e-4);                                          // log(1) = 0
  ExpectLr(c, 2, 1e-4 + 9e-4 * std::log(2.0) / std::log(10.0));  // 3.70927e-4
  ExpectLr(c, 5, 1e-4 + 9e-4 * std::log(5.0) / std::log(10.0));  // 7.29073e-4
  EXPECT_NEAR(ScheduledLr(c, 5), 7.29073e-4, 1e-9);              // the number itself
  ExpectLr(c, 10, 1e-3);                                         // log(10) / log(10)
  ExpectLr(c, 11, 1e-3);
  ExpectLr(c, 5000, 1e-3);
}

TEST(LrSchedule, WarmupLrLinearIsIterationOverWarmup) {
  TrainConfig c;
  c.scheduler.type = LrScheduleType::kWarmupLR;
  c.scheduler.warmup_min_lr = 1e-4f;
  c.scheduler.warmup_max_lr = 1e-3f;
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.warmup_type = WarmupType::kLinear;
  ExpectLr(c, 1, 1e-4);
  ExpectLr(c, 6, 5.5e-4);  // i = 5: 1e-4 + 9e-4 * 0.5
  ExpectLr(c, 10, 1e-4 + 9e-4 * 0.9);
  ExpectLr(c, 11, 1e-3);
}

TEST(LrSchedule, WarmupMaxLrBelowZeroMeansTheOptimizerLr) {
  TrainConfig c;
  c.lr = 2e-3f;
  c.scheduler.type = LrScheduleType::kWarmupLR;
  c.scheduler.warmup_max_lr = -1.0f;
  c.scheduler.warmup_num_steps = 4;
  c.scheduler.warmup_type = WarmupType::kLinear;
  ExpectLr(c, 3, 2e-3 * 0.5);
  ExpectLr(c, 9, 2e-3);
}

TEST(LrSchedule, WarmupStepsBelowTwoAreRaisedToTwoAsInDeepSpeed) {
  TrainConfig c;
  c.scheduler.type = LrScheduleType::kWarmupLR;
  c.scheduler.warmup_min_lr = 0.0f;
  c.scheduler.warmup_max_lr = 1e-3f;
  c.scheduler.warmup_num_steps = 0;
  ExpectLr(c, 1, 0.0);   // i = 0 < 2: log(1)/log(2) = 0
  ExpectLr(c, 2, 1e-3);  // i = 1 < 2: log(2)/log(2) = 1
  ExpectLr(c, 3, 1e-3);
}

TEST(LrSchedule, WarmupDecayLrDecaysLinearlyToZeroAtTotal) {
  TrainConfig c;
  c.scheduler.type = LrScheduleType::kWarmupDecayLR;
  c.scheduler.warmup_min_lr = 0.0f;
  c.scheduler.warmup_max_lr = 1e-3f;
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.total_num_steps = 110;
  c.scheduler.warmup_type = WarmupType::kLinear;
  ExpectLr(c, 1, 0.0);
  ExpectLr(c, 6, 5e-4);
  ExpectLr(c, 11, 1e-3);   // i = 10: (110 - 10) / 100
  ExpectLr(c, 61, 5e-4);   // i = 60: 50 / 100
  ExpectLr(c, 110, 1e-5);  // i = 109: 1 / 100
  ExpectLr(c, 111, 0.0);   // i = 110: 0
  ExpectLr(c, 200, 0.0);   // clamped at 0, as DeepSpeed's max(0, ...)
}

TEST(LrSchedule, WarmupDecayLrTotalZeroMeansTheRunsSteps) {
  TrainConfig c;
  c.steps = 110;
  c.scheduler.type = LrScheduleType::kWarmupDecayLR;
  c.scheduler.warmup_max_lr = 1e-3f;
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.total_num_steps = 0;
  ExpectLr(c, 61, 5e-4);
}

TEST(LrSchedule, WarmupCosineLrFollowsDeepSpeedRatios) {
  TrainConfig c;
  c.lr = 2e-3f;
  c.scheduler.type = LrScheduleType::kWarmupCosineLR;
  c.scheduler.warmup_min_ratio = 0.1f;
  c.scheduler.cos_min_ratio = 0.01f;
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.total_num_steps = 110;
  c.scheduler.warmup_type = WarmupType::kLinear;
  ExpectLr(c, 1, 2e-3 * 0.1);
  ExpectLr(c, 6, 2e-3 * 0.55);  // 0.1 + 0.9 * 5/10
  // i = 10: real_last_step = 1 of 100: 0.01 + 0.99 * (1 + cos(pi/100)) / 2
  ExpectLr(c, 11, 2e-3 * (0.01 + 0.99 * (1.0 + std::cos(M_PI / 100.0)) / 2.0));
  EXPECT_NEAR(ScheduledLr(c, 11), 1.9995115e-3, 1e-9);
  ExpectLr(c, 60, 2e-3 * 0.505);  // real_last_step 50: cos(pi/2) = 0
  ExpectLr(c, 110, 2e-3 * 0.01);  // real_last_step 100: cos(pi) = -1
  // Past total_num_steps the floor holds (DeepSpeed clamps the progress at 1).
  ExpectLr(c, 150, 2e-3 * 0.01);
}

TEST(LrSchedule, WarmupCosineLrLogWarmup) {
  TrainConfig c;
  c.lr = 2e-3f;
  c.scheduler.type = LrScheduleType::kWarmupCosineLR;
  c.scheduler.warmup_min_ratio = 0.1f;
  c.scheduler.cos_min_ratio = 0.01f;
  c.scheduler.warmup_num_steps = 10;
  c.scheduler.total_num_steps = 110;
  c.scheduler.warmup_type = WarmupType::kLog;
  ExpectLr(c, 4, 2e-3 * (0.1 + 0.9 * std::log(4.0) / std::log(10.0)));  // 1.283708e-3
  EXPECT_NEAR(ScheduledLr(c, 4), 1.283708e-3, 1e-9);
}

// A total at or below the warmup is accepted, as DeepSpeed accepts it with a
// warning: after the warmup WarmupDecayLR gives warmup_min_lr (max(0, (T -
// i) / max(1, T - W)) = 0) and WarmupCosineLR its floor, and ScheduleNotes
// says so. A total above the warmup has nothing to say.
TEST(LrSchedule, ATotalWithinTheWarmupIsDeepSpeedsAndIsNoted) {
  TrainConfig decay;
  decay.scheduler.type = LrScheduleType::kWarmupDecayLR;
  decay.scheduler.warmup_min_lr = 1e-5f;
  decay.scheduler.warmup_max_lr = 1e-3f;
  decay.scheduler.warmup_num_steps = 50;
  decay.scheduler.total_num_steps = 20;
  decay.scheduler.warmup_type = WarmupType::kLinear;
  ASSERT_TRUE(ValidateTrainConfig(decay).ok()) << ValidateTrainConfig(decay).ToString();
  ExpectLr(decay, 26, 1e-5 + (1e-3 - 1e-5) * 25.0 / 50.0);  // still warming up
  ExpectLr(decay, 51, 1e-5);                                // i = 50: (20 - 50) / 1 < 0
  ASSERT_EQ(ScheduleNotes(decay).size(), 1u);
  EXPECT_NE(ScheduleNotes(decay)[0].find("warmup_min_lr"), std::string::npos);

  TrainConfig cosine;
  cosine.lr = 2e-3f;
  cosine.scheduler.type = LrScheduleType::kWarmupCosineLR;
  cosine.scheduler.cos_min_ratio = 0.01f;
  cosine.scheduler.warmup_num_steps = 10;
  cosine.scheduler.total_num_steps = 10;
  ASSERT_TRUE(ValidateTrainConfig(cosine).ok()) << ValidateTrainConfig(cosine).ToString();
  ExpectLr(cosine, 11, 2e-3 * 0.01);
  ExpectLr(cosine, 40, 2e-3 * 0.01);
  ASSERT_EQ(ScheduleNotes(cosine).size(), 1u);
  EXPECT_NE(ScheduleNotes(cosine)[0].find("cos_min_ratio"), std::string::npos);

  cosine.scheduler.total_num_steps = 11;
  EXPECT_TRUE(ScheduleNotes(cosine).empty());
  EXPECT_TRUE(ScheduleNotes(TrainConfig()).empty());
}

}  // namespace
}  // namespace tierflow

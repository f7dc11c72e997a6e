// LossScaler against DeepSpeed's DynamicLossScaler semantics: hysteresis
// absorbs overflows before the scale halves, a window of good steps doubles it
// (and refills hysteresis), the scale never drops below min_scale, a static or
// disabled scaler never moves, and Restore resumes the exact sequence.
#include "engine/loss_scaler.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace tierflow {
namespace {

LossScalerOptions Dynamic(int power, int window, int hysteresis, float min_scale) {
  LossScalerOptions o;
  o.initial_scale_power = power;
  o.scale_window = window;
  o.hysteresis = hysteresis;
  o.min_scale = min_scale;
  return o;
}

TEST(LossScaler, StartsAtTwoToTheInitialPower) {
  EXPECT_EQ(LossScaler(Dynamic(16, 1000, 2, 1), true).scale(), 65536.0f);
  EXPECT_EQ(LossScaler(Dynamic(3, 1000, 2, 1), true).scale(), 8.0f);
}

TEST(LossScaler, HysteresisAbsorbsOverflowsBeforeHalving) {
  LossScaler s(Dynamic(10, 1000, 3, 1), true);
  s.Update(true);  // hysteresis 3 -> 2
  EXPECT_EQ(s.scale(), 1024.0f);
  s.Update(true);  // 2 -> 1
  EXPECT_EQ(s.scale(), 1024.0f);
  s.Update(true);  // none left: halve
  EXPECT_EQ(s.scale(), 512.0f);
  s.Update(true);  // still none left: every further overflow halves
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.state().hysteresis_left, 1);
}

TEST(LossScaler, GoodStepsDoNotRefillHysteresisUntilTheScaleDoubles) {
  LossScaler s(Dynamic(10, 4, 2, 1), true);
  s.Update(true);  // 2 -> 1
  s.Update(false);
  s.Update(true);  // nothing left: halves despite the good step between
  EXPECT_EQ(s.scale(), 512.0f);
  for (int i = 0; i < 4; ++i) s.Update(false);  // a full window: doubles, refills
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  s.Update(true);
  EXPECT_EQ(s.scale(), 1024.0f);  // absorbed again
}

TEST(LossScaler, WindowOfGoodStepsDoublesAndAnOverflowRestartsIt) {
  LossScaler s(Dynamic(4, 3, 1, 1), true);
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 16.0f);
  s.Update(false);  // third good step in a row
  EXPECT_EQ(s.scale(), 32.0f);
  s.Update(false);
  s.Update(false);
  s.Update(true);  // hysteresis 1: halves, and the run of good steps restarts
  EXPECT_EQ(s.scale(), 16.0f);
  EXPECT_EQ(s.state().good_steps, 0);
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 16.0f);
  s.Update(false);
  EXPECT_EQ(s.scale(), 32.0f);
}

TEST(LossScaler, NeverBelowMinScale) {
  LossScaler s(Dynamic(3, 1000, 1, 2.0f), true);  // 8
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 2.0f);
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 2.0f);
}

TEST(LossScaler, StaticAndDisabledScalersNeverMove) {
  LossScalerOptions o = Dynamic(10, 2, 1, 1);
  o.static_scale = 128.0f;
  LossScaler fixed(o, true);
  LossScaler off(Dynamic(10, 2, 1, 1), /*enabled=*/false);
  for (bool overflow : {true, true, false, false, false, true}) {
    fixed.Update(overflow);
    off.Update(overflow);
  }
  EXPECT_EQ(fixed.scale(), 128.0f);
  EXPECT_EQ(off.scale(), 1.0f);
}

TEST(LossScaler, RestoreResumesTheSameSequence) {
  const std::vector<bool> overflows = {true,  false, false, true, true,  false, false,
                                       false, false, false, true, false, false, false};
  LossScaler whole(Dynamic(12, 3, 2, 1), true);
  std::vector<float> expected;
  for (bool o : overflows) {
    whole.Update(o);
    expected.push_back(whole.scale());
  }
  for (size_t cut = 0; cut <= overflows.size(); ++cut) {
    LossScaler first(Dynamic(12, 3, 2, 1), true);
    for (size_t i = 0; i < cut; ++i) first.Update(overflows[i]);
    LossScaler resumed(Dynamic(12, 3, 2, 1), true);
    resumed.Restore(first.state());
    for (size_t i = cut; i < overflows.size(); ++i) {
      resumed.Update(overflows[i]);
      ASSERT_EQ(resumed.scale(), expected[i]) << "cut at " << cut << ", step " << i;
    }
    EXPECT_EQ(resumed.state().good_steps, whole.state().good_steps) << "cut at " << cut;
    EXPECT_EQ(resumed.state().hysteresis_left, whole.state().hysteresis_left) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace tierflow

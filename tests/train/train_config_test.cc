// Reading `tierflow train` configs: a real DeepSpeed ZeRO-Infinity config,
// each DeepSpeed key's mapping, "auto", warnings for unknown and ignored
// keys, contradictions, wrong types (naming the JSON path), malformed JSON
// (naming the file and position), and ValidateTrainConfig's ranges.
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "train/train_config.h"

namespace tierflow {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

StatusOr<TrainConfig> Parse(const std::string& text) {
  return ParseTrainConfig(text, "config.json", TrainConfig());
}

TrainConfig ParseOk(const std::string& text) {
  auto c = Parse(text);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : TrainConfig();
}

std::string ParseError(const std::string& text) {
  auto c = Parse(text);
  EXPECT_FALSE(c.ok()) << "expected an error for " << text;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  return c.status().message();
}

bool HasWarning(const TrainConfig& c, const std::string& part) {
  for (const auto& w : c.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

// DeepSpeed's ZeRO-Infinity example (docs: config-json, "NVMe offload"),
// with the optimizer, scheduler and fp16 blocks DeepSpeed's tutorials use.
constexpr const char* kZeroInfinityConfig = R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 4,
  "steps_per_print": 2000,
  "gradient_clipping": 1.0,
  "wall_clock_breakdown": false,
  "optimizer": {
    "type": "Adam",
    "params": {
      "lr": 0.00015,
      "betas": [0.9, 0.95],
      "eps": 1e-8,
      "weight_decay": 0.01
    }
  },
  "scheduler": {
    "type": "WarmupDecayLR",
    "params": {
      "warmup_min_lr": 0,
      "warmup_max_lr": 0.00015,
      "warmup_num_steps": 100,
      "total_num_steps": 5000,
      "warmup_type": "linear"
    }
  },
  "fp16": {
    "enabled": true,
    "loss_scale": 0,
    "initial_scale_power": 12,
    "loss_scale_window": 500,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "zero_optimization": {
    "stage": 3,
    "contiguous_gradients": true,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_prefetch_bucket_size": 1e7,
    "stage3_param_persistence_threshold": 1e5,
    "reduce_bucket_size": 1e7,
    "sub_group_size": 1e9,
    "offload_optimizer": {
      "device": "nvme",
      "nvme_path": "/local_nvme",
      "pin_memory": true,
      "buffer_count": 4,
      "fast_init": false
    },
    "offload_param": {
      "device": "nvme",
      "nvme_path": "/local_nvme",
      "pin_memory": true,
      "buffer_count": 5,
      "buffer_size": 1e8,
      "max_in_cpu": 1e9
    }
  },
  "aio": {
    "block_size": 1048576,
    "queue_depth": 8,
    "thread_count": 1,
    "single_submit": false,
    "overlap_events": true
  }
})";

TEST(TrainConfig, ZeroInfinityDeepSpeedConfigParsesToTheRightFields) {
  TrainConfig c = ParseOk(kZeroInfinityConfig);
  EXPECT_EQ(c.micro_batch, 8);
  EXPECT_EQ(c.grad_accum, 4);
  EXPECT_FLOAT_EQ(c.gradient_clipping, 1.0f);
  EXPECT_EQ(c.optimizer,
            TrainOptimizer::kAdamW);  // DeepSpeed's "Adam" defaults to adam_w_mode = true
  EXPECT_FLOAT_EQ(c.lr, 1.5e-4f);
  EXPECT_FLOAT_EQ(c.beta1, 0.9f);
  EXPECT_FLOAT_EQ(c.beta2, 0.95f);
  EXPECT_FLOAT_EQ(c.eps, 1e-8f);
  EXPECT_FLOAT_EQ(c.weight_decay, 0.01f);
  EXPECT_EQ(c.scheduler.type, LrScheduleType::kWarmupDecayLR);
  EXPECT_FLOAT_EQ(c.scheduler.warmup_min_lr, 0.0f);
  EXPECT_FLOAT_EQ(c.scheduler.warmup_max_lr, 1.5e-4f);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 100);
  EXPECT_EQ(c.scheduler.total_num_steps, 5000);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLinear);
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_FLOAT_EQ(c.loss_scale, 0.0f);
  EXPECT_EQ(c.initial_scale_power, 12);
  EXPECT_EQ(c.loss_scale_window, 500);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_FLOAT_EQ(c.min_loss_scale, 1.0f);
  EXPECT_EQ(c.offload, OffloadPlacement::kNvme);
  EXPECT_EQ(c.nvme_paths, std::vector<std::string>{"/local_nvme"});
  EXPECT_TRUE(c.pin_memory);
  // DeepSpeed's swap-buffer pool has no counterpart: warned, not applied.
  EXPECT_EQ(c.buffer_count, 0);
  EXPECT_TRUE(HasWarning(c, "'zero_optimization.offload_optimizer.buffer_count' ignored"));
  // Stage 3: DeepSpeed's sub-group rule, whole tensors of at least 1e9.
  EXPECT_EQ(c.sub_group_size, 1000000000u);
  EXPECT_EQ(c.sub_group_cut, SubGroupCut::kWholeTensors);
  EXPECT_EQ(c.aio_block_size, 1048576u);
  EXPECT_EQ(c.aio_queue_depth, 8u);
  EXPECT_EQ(c.aio_threads, 1u);  // thread_count: the io_uring rings
  // Accepted-but-unused keys are warned about by path, and none is "unknown".
  // offload_param is honoured (parameter offload); the pool sizes have no
  // counterpart and are warned about by path.
  EXPECT_EQ(c.offload_param, ParamOffload::kNvme);
  EXPECT_TRUE(HasWarning(c, "'zero_optimization.offload_param.buffer_count' ignored"));
  EXPECT_TRUE(HasWarning(c, "'zero_optimization.offload_param.max_in_cpu' ignored"));
  EXPECT_TRUE(HasWarning(c, "'zero_optimization.stage' = 3"));
  EXPECT_FALSE(HasWarning(c, "'aio.thread_count' ignored"));
  EXPECT_TRUE(HasWarning(c, "'aio.single_submit' ignored"));
  EXPECT_TRUE(HasWarning(c, "'steps_per_print' ignored"));
  EXPECT_TRUE(HasWarning(c, "'zero_optimization.stage3_max_live_parameters' ignored"));
  EXPECT_FALSE(HasWarning(c, "unknown key")) << ::testing::PrintToString(c.warnings);
  EXPECT_TRUE(ValidateTrainConfig(c).ok()) << ValidateTrainConfig(c).ToString();
}

TEST(TrainConfig, WarningsNameTheFile) {
  TrainConfig c = ParseOk(R"({"steps_per_print": 10})");
  EXPECT_THAT(c.warnings, Contains(HasSubstr("config.json: 'steps_per_print' ignored")));
  for (const std::string& w : c.warnings) EXPECT_EQ(w.rfind("config.json: ", 0), 0u) << w;
}

// Where a DeepSpeed config is silent it trains as DeepSpeed would (no
// clipping, fp32), saying so; tierflow's own defaults stay for configs of
// tierflow keys only, and "auto" keeps them (the HF Trainer fills it in).
TEST(TrainConfig, ADeepSpeedConfigGetsDeepSpeedsDefaults) {
  const TrainConfig ds = ParseOk(R"({"train_micro_batch_size_per_gpu": 2})");
  EXPECT_FLOAT_EQ(ds.gradient_clipping, 0.0f);
  EXPECT_EQ(ds.dtype, DType::kF32);
  EXPECT_TRUE(HasWarning(ds, "no 'gradient_clipping'"));
  EXPECT_TRUE(HasWarning(ds, "training in fp32, DeepSpeed's default"));
  const TrainConfig own = ParseOk(R"({"tierflow": {"micro_batch": 2}})");
  EXPECT_FLOAT_EQ(own.gradient_clipping, TrainConfig().gradient_clipping);
  EXPECT_EQ(own.dtype, TrainConfig().dtype);
  EXPECT_TRUE(own.warnings.empty()) << ::testing::PrintToString(own.warnings);
  const TrainConfig hf = ParseOk(R"({"gradient_clipping": "auto", "bf16": {"enabled": "auto"}})");
  EXPECT_FLOAT_EQ(hf.gradient_clipping, TrainConfig().gradient_clipping);
  EXPECT_EQ(hf.dtype, TrainConfig().dtype);
  const TrainConfig set = ParseOk(R"({"gradient_clipping": 0.5, "fp16": {"enabled": true}})");
  EXPECT_FLOAT_EQ(set.gradient_clipping, 0.5f);
  EXPECT_EQ(set.dtype, DType::kF16);
  EXPECT_EQ(ParseOk(R"({"steps_per_print": 1, "tierflow": {"dtype": "bf16"}})").dtype,
            DType::kBF16);
}

// zero_optimization.sub_group_size means what DeepSpeed means by it: at
// stage 3 whole tensors of at least N (0: one tensor each); below stage 3
// DeepSpeed does not read it, and tierflow says it does not either.
TEST(TrainConfig, SubGroupSizeHasDeepSpeedsMeaning) {
  const TrainConfig three = ParseOk(R"({"zero_optimization": {"sub_group_size": 0, "stage": 3}})");
  EXPECT_EQ(three.sub_group_cut, SubGroupCut::kWholeTensors);
  EXPECT_EQ(three.sub_group_size, 0u);
  EXPECT_TRUE(ValidateTrainConfig(three).ok()) << ValidateTrainConfig(three).ToString();
  const TrainConfig big = ParseOk(R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e12}})");
  EXPECT_EQ(big.sub_group_size, 1000000000000u);
  const TrainConfig two = ParseOk(R"({"zero_optimization": {"stage": 2, "sub_group_size": 1e6}})");
  EXPECT_EQ(two.sub_group_cut, SubGroupCut::kSlices);
  EXPECT_EQ(two.sub_group_size, TrainConfig().sub_group_size);
  EXPECT_TRUE(HasWarning(two,
                         "'zero_optimization.sub_group_size' ignored: DeepSpeed reads it at "
                         "stage 3 only"));
  const TrainConfig own = ParseOk(R"({"tierflow": {"sub_group_size": 1e6}})");
  EXPECT_EQ(own.sub_group_cut, SubGroupCut::kSlices);
  EXPECT_EQ(own.sub_group_size, 1000000u);
  // The two rules for one setting: a contradiction, even with equal numbers.
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e6},
                             "tierflow": {"sub_group_size": 1e6}})"),
              AllOf(HasSubstr("contradictory"), HasSubstr("tierflow.sub_group_size"),
                    HasSubstr("zero_optimization.sub_group_size")));
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"stage": 3, "sub_group_size": -1}})"),
              HasSubstr("zero_optimization.sub_group_size"));
  EXPECT_THAT(ParseError(R"({"tierflow": {"sub_group_size": 0}})"),
              HasSubstr("tierflow.sub_group_size"));
  TrainConfig zero;
  zero.sub_group_size = 0;  // slices of nothing: refused by name
  EXPECT_THAT(ValidateTrainConfig(zero).message(), HasSubstr("sub_group_size"));
}

// offload_optimizer.ratio is DeepSpeed's share of the state the CPU updates
// (stage 3): below 1 it would keep the rest on the GPU, which tierflow does
// not do; refused by name. Below stage 3 DeepSpeed ignores it, and so does
// tierflow, saying so; it never sets tierflow's NVMe split.
TEST(TrainConfig, OffloadRatioHasDeepSpeedsMeaning) {
  EXPECT_THAT(
      ParseError(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"ratio": 0.3}}})"),
      AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"), HasSubstr("on the GPU"),
            HasSubstr("tierflow.nvme_ratio")));
  const TrainConfig all =
      ParseOk(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"ratio": 1}}})");
  EXPECT_DOUBLE_EQ(all.nvme_ratio, TrainConfig().nvme_ratio);
  EXPECT_FALSE(HasWarning(all, "ratio"));
  const TrainConfig two =
      ParseOk(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"ratio": 0.3}}})");
  EXPECT_DOUBLE_EQ(two.nvme_ratio, TrainConfig().nvme_ratio);
  EXPECT_TRUE(HasWarning(two, "'zero_optimization.offload_optimizer.ratio' ignored"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"offload_optimizer": {"ratio": 1.5}}})"),
              HasSubstr("zero_optimization.offload_optimizer.ratio"));
}

// DeepSpeed's deprecated boolean form of the ZeRO block, read as DeepSpeed
// reads it, and its spellings of keys tierflow does not use are warned as
// ignored (not as unknown).
TEST(TrainConfig, DeprecatedAndStage3SpellingsAreReadAsDeepSpeedReadsThem) {
  const TrainConfig on = ParseOk(R"({"zero_optimization": true})");
  EXPECT_TRUE(HasWarning(on, "deprecated form of stage 1"));
  const TrainConfig off = ParseOk(R"({"zero_optimization": false})");
  EXPECT_TRUE(HasWarning(off, "'zero_optimization.stage' = 0 ignored"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": false, "tierflow": {"offload": "nvme"}})"),
              HasSubstr("contradictory"));
  const TrainConfig spelled = ParseOk(R"({"zero_optimization": {"cpu_offload_param": true,
      "stage3_module_granularity_threshold": 0, "stage3_use_all_reduce_for_fetch_params": false,
      "zenflow": {}, "offload_optimizer": {"convert_grad_on_cpu": true}}})");
  EXPECT_FALSE(HasWarning(spelled, "unknown key")) << ::testing::PrintToString(spelled.warnings);
  EXPECT_EQ(spelled.offload_param, ParamOffload::kHost);  // the old spelling of device "cpu"
  EXPECT_TRUE(HasWarning(spelled, "'zero_optimization.offload_optimizer.convert_grad_on_cpu'"));
}

TEST(TrainConfig, BaseValuesSurviveWhenTheFileIsSilent) {
  TrainConfig base;
  base.lr = 7e-4f;
  base.micro_batch = 3;
  base.offload = OffloadPlacement::kHost;
  auto c = ParseTrainConfig("{}", "x.json", base);
  ASSERT_TRUE(c.ok());
  EXPECT_FLOAT_EQ(c->lr, 7e-4f);
  EXPECT_EQ(c->micro_batch, 3);
  EXPECT_EQ(c->offload, OffloadPlacement::kHost);
  EXPECT_TRUE(c->warnings.empty());
}

TEST(TrainConfig, BatchKeysResolveAsDeepSpeedDoesOnOneGpu) {
  TrainConfig a = ParseOk(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  EXPECT_EQ(a.micro_batch, 4);
  EXPECT_EQ(a.grad_accum, 8);
  TrainConfig b = ParseOk(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})");
  EXPECT_EQ(b.micro_batch, 16);
  EXPECT_EQ(b.grad_accum, 2);
  TrainConfig d = ParseOk(R"({"train_batch_size": 6})");
  EXPECT_EQ(d.micro_batch, 6);
  EXPECT_EQ(d.grad_accum, 1);
  TrainConfig e = ParseOk(R"({"gradient_accumulation_steps": 5})");
  EXPECT_EQ(e.grad_accum, 5);
  EXPECT_EQ(e.micro_batch, TrainConfig().micro_batch);
}

// Several ranks: train_batch_size = micro x accumulation x ranks.
TEST(TrainConfig, BatchKeysTakeTheWorldSize) {
  auto a = ParseTrainConfig(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})",
                            "config.json", TrainConfig(), 2);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->micro_batch, 4);
  EXPECT_EQ(a->grad_accum, 4);
  auto b = ParseTrainConfig(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                "gradient_accumulation_steps": 8})",
                            "config.json", TrainConfig(), 2);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(),
              AllOf(HasSubstr("4 * 8 x 2 ranks = 64"), HasSubstr("train_batch_size = 32")));
  auto c = ParseTrainConfig(R"({"train_batch_size": 30})", "config.json", TrainConfig(), 4);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("cannot be shared by 4 ranks"));
}

TEST(TrainConfig, TrainBatchSizeThatDisagreesIsAnErrorNamingAllThree) {
  std::string m = ParseError(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                 "gradient_accumulation_steps": 8})");
  EXPECT_THAT(m,
              AllOf(HasSubstr("config.json"), HasSubstr("contradictory"),
                    HasSubstr("train_batch_size = 30"), HasSubstr("train_micro_batch_size_per_gpu"),
                    HasSubstr("gradient_accumulation_steps"), HasSubstr("32")));
  EXPECT_THAT(ParseError(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})"),
              HasSubstr("not a multiple of train_micro_batch_size_per_gpu = 4"));
}

TEST(TrainConfig, Bf16AndFp16BothEnabledIsAnErrorNamingBoth) {
  std::string m = ParseError(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  EXPECT_THAT(
      m, AllOf(HasSubstr("contradictory"), HasSubstr("fp16.enabled"), HasSubstr("bf16.enabled")));
}

TEST(TrainConfig, PrecisionBlocksSetDtype) {
  EXPECT_EQ(ParseOk(R"({"bf16": {"enabled": true}})").dtype, DType::kBF16);
  EXPECT_EQ(ParseOk(R"({"bfloat16": {"enabled": true}})").dtype, DType::kBF16);
  EXPECT_EQ(ParseOk(R"({"fp16": {"enabled": true}, "bf16": {"enabled": false}})").dtype,
            DType::kF16);
  TrainConfig fp32 = ParseOk(R"({"fp16": {"enabled": false}})");
  EXPECT_EQ(fp32.dtype, DType::kF32);
  EXPECT_TRUE(HasWarning(fp32, "training in fp32"));
}

TEST(TrainConfig, TierflowKeyThatContradictsADeepSpeedKeyNamesBoth) {
  std::string m =
      ParseError(R"({"train_micro_batch_size_per_gpu": 4, "tierflow": {"micro_batch": 2}})");
  EXPECT_THAT(m, AllOf(HasSubstr("tierflow.micro_batch"),
                       HasSubstr("train_micro_batch_size_per_gpu"), HasSubstr("contradictory")));
  std::string d = ParseError(R"({"bf16": {"enabled": true}, "tierflow": {"dtype": "fp32"}})");
  EXPECT_THAT(d, AllOf(HasSubstr("bf16.enabled"), HasSubstr("tierflow.dtype")));
  // Agreeing values are fine.
  TrainConfig ok = ParseOk(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
                              "tierflow": {"lr": 0.01}})");
  EXPECT_FLOAT_EQ(ok.lr, 0.01f);
}

TEST(TrainConfig, AioKeysAreKeptAsGivenAndAbsentOnesStayUnset) {
  // Absent: 0, which the NVMe choice reads as "not given" (profile or probe).
  TrainConfig none = ParseOk(R"({"aio": {"single_submit": false}})");
  EXPECT_EQ(none.aio_block_size, 0u);
  EXPECT_EQ(none.aio_queue_depth, 0u);
  EXPECT_EQ(none.aio_threads, 0u);
  EXPECT_EQ(none.buffer_count, 0);
  TrainConfig c = ParseOk(R"({"aio": {"block_size": 16777216, "queue_depth": 4,
                                      "intra_op_parallelism": 2},
                              "tierflow": {"profile": "/etc/tierflow/profile.json"}})");
  EXPECT_EQ(c.aio_block_size, 16777216u);
  EXPECT_EQ(c.aio_queue_depth, 4u);
  EXPECT_EQ(c.aio_threads, 2u);
  EXPECT_EQ(c.profile, "/etc/tierflow/profile.json");
  // DeepSpeed's two names for the I/O threads must agree.
  EXPECT_THAT(ParseError(R"({"aio": {"thread_count": 1, "intra_op_parallelism": 4}})"),
              AllOf(HasSubstr("aio.thread_count"), HasSubstr("aio.intra_op_parallelism"),
                    HasSubstr("contradictory")));
  EXPECT_THAT(ParseError(R"({"aio": {"thread_count": 65}})"), HasSubstr("aio.thread_count"));
  EXPECT_THAT(ParseError(R"({"aio": {"block_size": 0}})"), HasSubstr("aio.block_size"));
  // DeepSpeed accepts any buffer_count >= 0; tierflow warns it has no use for it.
  EXPECT_TRUE(
      HasWarning(ParseOk(R"({"zero_optimization": {"offload_optimizer": {"buffer_count": 0}}})"),
                 "buffer_count' ignored"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"offload_optimizer": {"buffer_count": -1}}})"),
              HasSubstr("buffer_count"));
}

TEST(TrainConfig, BiasCorrectionIsRead) {
  EXPECT_TRUE(ParseOk("{}").bias_correction);
  EXPECT_FALSE(ParseOk(R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": false}}})")
                   .bias_correction);
  EXPECT_THAT(ParseError(R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": 0}}})"),
              HasSubstr("optimizer.params.bias_correction"));
}

TEST(TrainConfig, AdamTypeFollowsDeepSpeedsAdamWMode) {
  EXPECT_EQ(ParseOk(R"({"optimizer": {"type": "Adam"}})").optimizer, TrainOptimizer::kAdamW);
  EXPECT_EQ(
      ParseOk(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})").optimizer,
      TrainOptimizer::kAdam);
  EXPECT_EQ(ParseOk(R"({"optimizer": {"type": "ADAMW"}})").optimizer, TrainOptimizer::kAdamW);
  EXPECT_EQ(ParseOk(R"({"optimizer": {"type": "Adam", "adam_w_mode": false}})").optimizer,
            TrainOptimizer::kAdam);
}

TEST(TrainConfig, UnsupportedOptimizerNamesTheSupportedOnes) {
  std::string m = ParseError(R"({"optimizer": {"type": "Lamb", "params": {"lr": 0.1}}})");
  EXPECT_THAT(m, AllOf(HasSubstr("optimizer.type"), HasSubstr("Lamb"), HasSubstr("\"Adam\""),
                       HasSubstr("\"AdamW\"")));
  EXPECT_THAT(ParseError(R"({"optimizer": {"type": "OneBitAdam"}})"), HasSubstr("OneBitAdam"));
  EXPECT_THAT(ParseError(R"({"optimizer": {"params": {"lr": 0.1}}})"),
              HasSubstr("optimizer.type: missing"));
  EXPECT_THAT(ParseError(R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1}}})"),
              HasSubstr("gradient_clipping"));
}

TEST(TrainConfig, OffloadDevicesMapToTiers) {
  EXPECT_EQ(ParseOk(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})").offload,
            OffloadPlacement::kHost);
  TrainConfig none = ParseOk(R"({"zero_optimization": {"offload_optimizer": {"device": "none"}}})");
  EXPECT_EQ(none.offload, OffloadPlacement::kHost);
  EXPECT_TRUE(HasWarning(none, "always offloads optimizer state"));
  EXPECT_EQ(ParseOk(R"({"zero_optimization": {"cpu_offload": true}})").offload,
            OffloadPlacement::kHost);
  TrainConfig two = ParseOk(R"({"zero_optimization": {"offload_optimizer":
      {"device": "nvme", "nvme_path": ["/nvme0", "/nvme1"], "pin_memory": false},
      "stage": 2}, "tierflow": {"nvme_ratio": 0.5, "buffer_count": 6}})");
  EXPECT_EQ(two.offload, OffloadPlacement::kNvme);
  EXPECT_EQ(two.nvme_paths, (std::vector<std::string>{"/nvme0", "/nvme1"}));
  EXPECT_DOUBLE_EQ(two.nvme_ratio, 0.5);
  EXPECT_FALSE(two.pin_memory);
  EXPECT_FALSE(ParseOk("{}").pin_memory);  // DeepSpeed's default: the state stays pageable
  EXPECT_EQ(ParseOk(R"({"tierflow": {"grad_bucket_params": 1e6}})").grad_bucket_params,
            std::optional<uint64_t>(1000000));
  EXPECT_FALSE(ParseOk("{}").grad_bucket_params.has_value());
  EXPECT_THAT(ParseError(R"({"tierflow": {"grad_bucket_params": 0}})"),
              HasSubstr("tierflow.grad_bucket_params"));
  // DeepSpeed reads "bf16" before its old spelling "bfloat16": so does
  // tierflow, with a warning for the one it passes over.
  const TrainConfig both =
      ParseOk(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": false}})");
  EXPECT_EQ(both.dtype, DType::kBF16);
  EXPECT_TRUE(HasWarning(both, "'bf16' is given too"));
  EXPECT_EQ(ParseOk(R"({"bfloat16": {"enabled": false}, "fp16": {"enabled": true}})").dtype,
            DType::kF16);
  EXPECT_EQ(two.buffer_count, 6);
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})"),
              AllOf(HasSubstr("zero_optimization.offload_optimizer.device"), HasSubstr("gpu")));
}

TEST(TrainConfig, ZeroStageZeroWithOffloadIsAContradiction) {
  std::string m = ParseError(R"({"zero_optimization": {"stage": 0,
      "offload_optimizer": {"device": "nvme"}}})");
  EXPECT_THAT(m, AllOf(HasSubstr("zero_optimization.stage = 0"),
                       HasSubstr("zero_optimization.offload_optimizer.device")));
  TrainConfig alone = ParseOk(R"({"zero_optimization": {"stage": 0}})");
  EXPECT_TRUE(HasWarning(alone, "'zero_optimization.stage' = 0 ignored"));
  TrainConfig two = ParseOk(R"({"zero_optimization": {"stage": 2}})");
  EXPECT_FALSE(HasWarning(two, "stage")) << ::testing::PrintToString(two.warnings);
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"stage": 4}})"),
              HasSubstr("zero_optimization.stage: value 4 is out of range [0, 3]"));
}

TEST(TrainConfig, SchedulerBlocksGetDeepSpeedDefaults) {
  TrainConfig w = ParseOk(R"({"scheduler": {"type": "WarmupLR"}})");
  EXPECT_EQ(w.scheduler.type, LrScheduleType::kWarmupLR);
  EXPECT_FLOAT_EQ(w.scheduler.warmup_max_lr, 0.001f);
  EXPECT_EQ(w.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(w.scheduler.warmup_type, WarmupType::kLog);
  TrainConfig cos = ParseOk(R"({"scheduler": {"type": "WarmupCosineLR", "params":
      {"total_num_steps": 500, "warmup_min_ratio": 0.05, "warmup_num_steps": 20,
       "cos_min_ratio": 0.1, "warmup_type": "linear"}}})");
  EXPECT_EQ(cos.scheduler.type, LrScheduleType::kWarmupCosineLR);
  EXPECT_EQ(cos.scheduler.total_num_steps, 500);
  EXPECT_FLOAT_EQ(cos.scheduler.warmup_min_ratio, 0.05f);
  EXPECT_EQ(cos.scheduler.warmup_num_steps, 20);
  EXPECT_FLOAT_EQ(cos.scheduler.cos_min_ratio, 0.1f);
  EXPECT_EQ(cos.scheduler.warmup_type, WarmupType::kLinear);
  EXPECT_THAT(ParseError(R"({"scheduler": {"type": "OneCycle"}})"),
              AllOf(HasSubstr("scheduler.type"), HasSubstr("OneCycle"), HasSubstr("WarmupLR")));
  // DeepSpeed warns about an unknown warmup type and warms up with log.
  const TrainConfig cubic = ParseOk(R"({"scheduler": {"type": "WarmupLR", "params":
      {"warmup_type": "cubic"}}})");
  EXPECT_EQ(cubic.scheduler.warmup_type, WarmupType::kLog);
  EXPECT_TRUE(HasWarning(cubic, "'scheduler.params.warmup_type' = \"cubic\""));
  // A key of another schedule type is named as unknown, not silently used.
  TrainConfig wrong = ParseOk(R"({"scheduler": {"type": "WarmupLR", "params":
      {"cos_min_ratio": 0.1}}})");
  EXPECT_TRUE(HasWarning(wrong, "unknown key 'scheduler.params.cos_min_ratio' ignored"));
}

TEST(TrainConfig, UnknownKeysAreWarnedByPath) {
  TrainConfig c = ParseOk(R"({"trian_batch_size": 8, "optimizer": {"type": "AdamW",
      "params": {"lr": 0.1, "momentum": 0.9}}, "zero_optimization": {"offload_optimizer":
      {"devcie": "cpu"}}, "aio": {"blocksize": 4096}, "tierflow": {"seqlen": 64}})");
  EXPECT_TRUE(HasWarning(c, "unknown key 'trian_batch_size' ignored"));
  EXPECT_TRUE(HasWarning(c, "unknown key 'optimizer.params.momentum' ignored"));
  EXPECT_TRUE(HasWarning(c, "unknown key 'zero_optimization.offload_optimizer.devcie' ignored"));
  EXPECT_TRUE(HasWarning(c, "unknown key 'aio.blocksize' ignored"));
  EXPECT_TRUE(HasWarning(c, "unknown key 'tierflow.seqlen' ignored"));
}

TEST(TrainConfig, WrongTypesNameTheKeyPath) {
  EXPECT_THAT(ParseError(R"({"optimizer": {"type": "AdamW", "params": {"betas": 0.9}}})"),
              HasSubstr("config.json: optimizer.params.betas: expected an array of two numbers"));
  EXPECT_THAT(ParseError(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})"),
              HasSubstr("optimizer.params.betas: expected an array of two numbers"));
  EXPECT_THAT(ParseError(R"({"optimizer": {"type": "AdamW", "params": {"lr": "0.1"}}})"),
              HasSubstr("config.json: optimizer.params.lr: expected a number, got \"0.1\""));
  EXPECT_THAT(ParseError(R"({"train_micro_batch_size_per_gpu": 2.5})"),
              HasSubstr("train_micro_batch_size_per_gpu: expected an integer"));
  EXPECT_THAT(ParseError(R"({"train_micro_batch_size_per_gpu": 0})"),
              HasSubstr("train_micro_batch_size_per_gpu: value 0 is out of range"));
  EXPECT_THAT(ParseError(R"({"fp16": {"enabled": "yes"}})"),
              HasSubstr("fp16.enabled: expected true or false"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"offload_optimizer": {"pin_memory": 1}}})"),
              HasSubstr("zero_optimization.offload_optimizer.pin_memory: expected true or false"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"offload_optimizer": {"nvme_path": 3}}})"),
              HasSubstr("offload_optimizer.nvme_path: expected a string or an array of strings"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": {"sub_group_size": -1}})"),
              HasSubstr("zero_optimization.sub_group_size"));
  EXPECT_THAT(ParseError(R"({"aio": {"queue_depth": 1e20}})"), HasSubstr("aio.queue_depth"));
  EXPECT_THAT(ParseError(R"({"zero_optimization": []})"),
              HasSubstr("zero_optimization: expected an object"));
  EXPECT_THAT(ParseError(R"({"tierflow": {"steps": "many"}})"),
              HasSubstr("tierflow.steps: expected an integer"));
  EXPECT_THAT(ParseError(R"({"tierflow": {"trace_steps": [1, "x"]}})"),
              HasSubstr("tierflow.trace_steps[1]"));
  EXPECT_THAT(ParseError("[1, 2]"), HasSubstr("must be a JSON object"));
}

TEST(TrainConfig, MalformedJsonNamesTheFileAndPosition) {
  std::string m = ParseError("{\n  \"train_batch_size\": 8,\n  \"gradient_clipping\": ,\n}");
  EXPECT_THAT(m, AllOf(HasSubstr("config.json"), HasSubstr("not valid JSON"),
                       HasSubstr("line 3, column"), HasSubstr("byte")));
}

TEST(TrainConfig, CommentsAreAllowed) {
  TrainConfig c = ParseOk("{\n  // micro batch\n  \"train_micro_batch_size_per_gpu\": 2\n}");
  EXPECT_EQ(c.micro_batch, 2);
}

TEST(TrainConfig, AutoKeepsTheBaseValueAndIsNoted) {
  TrainConfig base;
  base.lr = 5e-4f;
  base.micro_batch = 3;
  base.grad_accum = 2;
  base.dtype = DType::kBF16;
  // The HF Trainer's usual ZeRO-2 config.
  auto c = ParseTrainConfig(R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
        "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true},
        "allgather_partitions": true, "allgather_bucket_size": 2e8, "overlap_comm": true,
        "reduce_scatter": true, "reduce_bucket_size": "auto", "contiguous_gradients": true},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
  })",
                            "hf.json", base);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FLOAT_EQ(c->lr, 5e-4f);
  EXPECT_EQ(c->micro_batch, 3);
  EXPECT_EQ(c->grad_accum, 2);
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_FLOAT_EQ(c->beta1, base.beta1);
  EXPECT_FLOAT_EQ(c->gradient_clipping, base.gradient_clipping);
  EXPECT_EQ(c->offload, OffloadPlacement::kHost);
  EXPECT_EQ(c->scheduler.type, LrScheduleType::kWarmupDecayLR);
  EXPECT_FLOAT_EQ(c->scheduler.warmup_max_lr, -1.0f);  // the optimizer's lr
  EXPECT_EQ(c->scheduler.total_num_steps, 0);          // the run's steps
  EXPECT_EQ(c->scheduler.warmup_num_steps, 0);         // base value, not DeepSpeed's 1000
  EXPECT_TRUE(HasWarning(*c, "'optimizer.params.lr' is \"auto\""));
  EXPECT_TRUE(HasWarning(*c, "'train_batch_size' is \"auto\""));
  EXPECT_FALSE(HasWarning(*c, "unknown key")) << ::testing::PrintToString(c->warnings);
  EXPECT_TRUE(ValidateTrainConfig(*c).ok()) << ValidateTrainConfig(*c).ToString();
}

// The tierflow block's "offload" is parsed where it is read: a bad value is
// refused naming the key, the value and the accepted placements.
TEST(TrainConfig, TierflowOffloadIsParsedWhereItIsRead) {
  EXPECT_EQ(ParseOk(R"({"tierflow": {"offload": "NVMe"}})").offload, OffloadPlacement::kNvme);
  EXPECT_THAT(ParseError(R"({"tierflow": {"offload": "gpu"}})"),
              AllOf(HasSubstr("tierflow.offload"), HasSubstr("'gpu'"),
                    HasSubstr("use auto, host (or cpu) or nvme")));
}

TEST(TrainConfig, TierflowDtypeIsParsedWhereItIsRead) {
  EXPECT_EQ(ParseOk(R"({"tierflow": {"dtype": "FP16"}})").dtype, DType::kF16);
  // The same precision spelled two ways is no contradiction.
  EXPECT_EQ(ParseOk(R"({"fp16": {"enabled": true}, "tierflow": {"dtype": "f16"}})").dtype,
            DType::kF16);
  EXPECT_THAT(ParseError(R"({"tierflow": {"dtype": "fp8"}})"),
              AllOf(HasSubstr("tierflow.dtype"), HasSubstr("'fp8'"), HasSubstr("bf16")));
}

TEST(TrainConfig, TierflowDeviceIsParsedWhereItIsRead) {
  EXPECT_EQ(ParseOk(R"({"tierflow": {"device": "cuda"}})").device.choice, DeviceChoice::kCuda);
  EXPECT_EQ(ParseOk(R"({"tierflow": {"device": "cpu"}})").device.choice, DeviceChoice::kCpu);
  EXPECT_THAT(ParseError(R"({"tierflow": {"device": "tpu"}})"),
              AllOf(HasSubstr("tierflow.device"), HasSubstr("'tpu'"),
                    HasSubstr("use auto, cpu, cuda or sim:PROFILE")));
  const TrainConfig sim = ParseOk(R"({"tierflow": {"device": "sim:l40s"}})");
  EXPECT_EQ(sim.device.choice, DeviceChoice::kSim);
  EXPECT_EQ(sim.device.sim_profile, "l40s");
}

TEST(TrainConfig, TierflowBlockMirrorsTheFieldNames) {
  TrainConfig c = ParseOk(R"({"tierflow": {
    "model": "/models/llama", "data": "corpus.jsonl", "text_field": "content",
    "seq_len": 512, "steps": 1000, "dtype": "fp32", "seed": 7, "out_dir": "/tmp/out",
    "checkpoint_every": 250, "offload": "cpu", "nvme_paths": ["/a", "/b"],
    "pipeline": "sync", "trace_steps": [2, 3], "resume": true, "device_memory": "2GiB",
    "activation_checkpointing": true, "eval_fraction": 0.1}})");
  EXPECT_EQ(c.model, "/models/llama");
  EXPECT_EQ(c.data, "corpus.jsonl");
  EXPECT_EQ(c.text_field, "content");
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_EQ(c.steps, 1000);
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.out_dir, "/tmp/out");
  EXPECT_EQ(c.checkpoint_every, 250);
  EXPECT_EQ(c.offload, OffloadPlacement::kHost);
  EXPECT_EQ(c.nvme_paths, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(c.pipeline, TrainPipeline::kSync);
  EXPECT_EQ(c.trace_steps, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(c.resume);
  EXPECT_EQ(c.device_memory, "2GiB");
  EXPECT_TRUE(c.activation_checkpointing);
  EXPECT_DOUBLE_EQ(c.eval_fraction, 0.1);
}

TEST(TrainConfig, InstructionDataKeysAreTierflowKeys) {
  TrainConfig c = ParseOk(R"({"tierflow": {"data_format": "chat", "chat_template": "chatml",
       "truncation": "drop", "packing": true, "max_sample_bytes": 1048576}})");
  EXPECT_EQ(c.data_format, TrainDataFormat::kChat);
  EXPECT_EQ(c.chat_template, TrainChatTemplate::kChatMl);
  EXPECT_EQ(c.truncation, Truncation::kDrop);
  EXPECT_TRUE(c.packing);
  EXPECT_EQ(c.max_sample_bytes, uint64_t{1} << 20);
  EXPECT_TRUE(ValidateTrainConfig(c).ok());
  EXPECT_THAT(ParseError(R"({"tierflow": {"packing": "yes"}})"), HasSubstr("tierflow.packing"));
}

// A named choice outside its names is refused where it is read, naming the
// key and the names to use (these were strings checked by the validator).
TEST(TrainConfig, NamedChoicesOutsideTheirNamesAreRefusedByKey) {
  struct Case {
    const char* key;
    const char* value;
    const char* names;
  };
  const Case cases[] = {
      {"pipeline", "async", "overlapped or sync"},
      {"optimizer", "sgd", "adamw or adam"},
      {"token_dtype", "u8", "u16 or u32"},
      {"data_format", "csv", "auto, text, jsonl, tokens, prompt-completion, alpaca or chat"},
      {"chat_template", "vicuna", "llama3, chatml, llama2 or mistral"},
      {"truncation", "wrap", "truncate or drop"},
      {"collectives", "nccl", "auto, host or device"},
      {"offload_gradients", "disk", "auto, host or nvme"},
      {"final_save", "some", "all, model or none"},
  };
  for (const Case& k : cases) {
    const std::string json =
        std::string(R"({"tierflow": {")") + k.key + R"(": ")" + k.value + R"("}})";
    EXPECT_THAT(ParseError(json), HasSubstr(std::string("config.json: tierflow.") + k.key + ": '" +
                                            k.value + "' is not valid; use " + k.names));
  }
  // Each name reads back as its value, "" included where it means "not given".
  EXPECT_EQ(ParseOk(R"({"tierflow": {"data_format": ""}})").data_format,
            TrainDataFormat::kByFileName);
  EXPECT_EQ(ParseOk(R"({"tierflow": {"token_dtype": "u32"}})").token_dtype, TrainTokenDtype::kU32);
  EXPECT_EQ(ParseOk(R"({"tierflow": {"collectives": "device"}})").collectives,
            TrainCollectives::kDevice);
  EXPECT_EQ(ParseOk(R"({"tierflow": {"final_save": "none"}})").final_save, FinalSave::kNone);
  EXPECT_EQ(ParseOk(R"({"tierflow": {"offload_gradients": "nvme"}})").offload_gradients,
            GradOffload::kNvme);
  EXPECT_EQ(ParseOk(R"({"tierflow": {"optimizer": "ADAM"}})").optimizer, TrainOptimizer::kAdam);
}

TEST(TrainConfig, GradTransferDtypeAndSpeculationAreTierflowKeys) {
  TrainConfig c = ParseOk(R"({"tierflow": {"grad_transfer_dtype": "fp32",
                                           "speculation_params": 1000000}})");
  EXPECT_EQ(c.grad_transfer_dtype, DType::kF32);
  EXPECT_EQ(c.speculation_params, uint64_t{1000000});
  c = ParseOk(R"({"fp16": {"enabled": true}, "tierflow": {"grad_transfer_dtype": "FP16"}})");
  EXPECT_EQ(c.grad_transfer_dtype, DType::kF16);
  EXPECT_TRUE(ValidateTrainConfig(c).ok());
  // Unset: the defaults (the weights dtype; speculation from free host memory).
  c = ParseOk(R"({"tierflow": {"grad_transfer_dtype": "auto", "speculation_params": "auto"}})");
  EXPECT_FALSE(c.grad_transfer_dtype.has_value());
  EXPECT_FALSE(c.speculation_params.has_value());
  EXPECT_THAT(ParseError(R"({"tierflow": {"grad_transfer_dtype": "int8"}})"),
              AllOf(HasSubstr("tierflow.grad_transfer_dtype"), HasSubstr("'int8'")));
  EXPECT_THAT(ParseError(R"({"tierflow": {"speculation_params": -1}})"),
              HasSubstr("tierflow.speculation_params"));
  EXPECT_THAT(ParseError(R"({"tierflow": {"speculation_params": "many"}})"),
              HasSubstr("tierflow.speculation_params"));
  // fp16 transfer of bf16 (unscaled) gradients is refused, naming the key.
  c = ParseOk(R"({"bf16": {"enabled": true}, "tierflow": {"grad_transfer_dtype": "fp16"}})");
  Status s = ValidateTrainConfig(c);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("grad_transfer_dtype"), HasSubstr("fp16 gradient transfer needs "
                                                                "fp16 weights")));
}

TEST(TrainConfig, LoadReadsTheFileAndNamesItInErrors) {
  std::string path = ::testing::TempDir() + "tierflow_train_config_test.json";
  {
    std::ofstream out(path);
    out << R"({"train_micro_batch_size_per_gpu": 5, "fp16": {"enabled": 1}})";
  }
  auto bad = LoadTrainConfig(path, TrainConfig());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ": fp16.enabled"));
  {
    std::ofstream out(path);
    out << R"({"train_micro_batch_size_per_gpu": 5})";
  }
  auto good = LoadTrainConfig(path, TrainConfig());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->micro_batch, 5);
  std::remove(path.c_str());
  auto missing = LoadTrainConfig(path, TrainConfig());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(path));
}

// ---- ValidateTrainConfig ----

Status ValidateWith(void (*edit)(TrainConfig&)) {
  TrainConfig c;
  edit(c);
  return ValidateTrainConfig(c);
}

TEST(ValidateTrainConfig, DefaultsAreValid) {
  EXPECT_TRUE(ValidateTrainConfig(TrainConfig()).ok());
}

TEST(ValidateTrainConfig, EachBadSettingIsNamed) {
  struct Case {
    void (*edit)(TrainConfig&);
    const char* setting;
  };
  const Case cases[] = {
      {[](TrainConfig& c) { c.micro_batch = 0; }, "micro_batch:"},
      {[](TrainConfig& c) { c.grad_accum = 0; }, "grad_accum:"},
      {[](TrainConfig& c) { c.seq_len = 1; }, "seq_len:"},
      {[](TrainConfig& c) { c.steps = 0; }, "steps:"},
      {[](TrainConfig& c) { c.lr = 0.0f; }, "lr:"},
      {[](TrainConfig& c) { c.lr = std::numeric_limits<float>::infinity(); }, "lr:"},
      {[](TrainConfig& c) { c.beta1 = 1.0f; }, "beta1:"},
      {[](TrainConfig& c) { c.beta2 = -0.1f; }, "beta2:"},
      {[](TrainConfig& c) { c.eps = -1e-8f; }, "eps:"},
      {[](TrainConfig& c) { c.weight_decay = -1.0f; }, "weight_decay:"},
      {[](TrainConfig& c) { c.gradient_clipping = -1.0f; }, "gradient_clipping:"},
      {[](TrainConfig& c) { c.nvme_ratio = 1.5; }, "nvme_ratio:"},
      {[](TrainConfig& c) { c.buffer_count = 1; }, "buffer_count:"},
      {[](TrainConfig& c) { c.sub_group_size = 0; }, "sub_group_size:"},
      {[](TrainConfig& c) { c.aio_block_size = 1000; }, "aio_block_size:"},
      {[](TrainConfig& c) { c.aio_block_size = 512u << 20; }, "aio_block_size:"},
      {[](TrainConfig& c) { c.aio_queue_depth = 5000; }, "aio_queue_depth:"},
      {[](TrainConfig& c) { c.aio_threads = 65; }, "aio_threads:"},
      {[](TrainConfig& c) { c.offload = static_cast<OffloadPlacement>(9); }, "offload:"},
      {[](TrainConfig& c) {
         c.offload = OffloadPlacement::kAuto;  // the planner picks its own share
         c.nvme_ratio = 0.5;
       },
       "nvme_ratio:"},
      {[](TrainConfig& c) {
         c.offload = OffloadPlacement::kHost;
         c.nvme_ratio = 0.25;
       },
       "nvme_ratio:"},
      {[](TrainConfig& c) { c.grad_transfer_dtype = DType::kF16; }, "grad_transfer_dtype:"},
      {[](TrainConfig& c) {
         c.pipeline = TrainPipeline::kSync;
         c.speculation_params = 1000;
       },
       "speculation_params:"},
      {[](TrainConfig& c) { c.speculation_params = uint64_t{1} << 41; }, "speculation_params:"},
      {[](TrainConfig& c) {
         c.dtype = DType::kF16;
         c.loss_scale_window = 0;
       },
       "loss_scale_window:"},
      {[](TrainConfig& c) {
         c.dtype = DType::kF16;
         c.hysteresis = 0;
       },
       "hysteresis:"},
      {[](TrainConfig& c) {
         c.dtype = DType::kF16;
         c.initial_scale_power = 70;
       },
       "initial_scale_power:"},
      {[](TrainConfig& c) {
         c.dtype = DType::kF16;
         c.min_loss_scale = 0.0f;
       },
       "min_loss_scale:"},
      {[](TrainConfig& c) {
         c.dtype = DType::kF16;
         c.loss_scale = -2.0f;
       },
       "loss_scale:"},
      {[](TrainConfig& c) {
         c.scheduler.type = LrScheduleType::kWarmupCosineLR;
         c.scheduler.cos_min_ratio = 2.0f;
       },
       "scheduler.cos_min_ratio:"},
      {[](TrainConfig& c) { c.trace_steps = {0}; }, "trace_steps:"},
      {[](TrainConfig& c) { c.checkpoint_every = -1; }, "checkpoint_every:"},
      {[](TrainConfig& c) { c.eval_fraction = 1.0; }, "eval_fraction:"},
      // Instruction-only settings with other data would be accepted and ignored.
      {[](TrainConfig& c) { c.chat_template = TrainChatTemplate::kLlama3; }, "chat_template:"},
      {[](TrainConfig& c) { c.packing = true; }, "packing:"},
      {[](TrainConfig& c) { c.truncation = Truncation::kDrop; }, "truncation:"},
      {[](TrainConfig& c) { c.max_sample_bytes = uint64_t{1} << 20; }, "max_sample_bytes:"},
      {[](TrainConfig& c) {
         c.data_format = TrainDataFormat::kChat;
         c.max_sample_bytes = 0;
       },
       "max_sample_bytes:"},
      {[](TrainConfig& c) {
         c.data_format = TrainDataFormat::kChat;
         c.max_sample_bytes = (uint64_t{1} << 30) + 1;
       },
       "max_sample_bytes:"},
      {[](TrainConfig& c) {
         c.data_format = TrainDataFormat::kChat;
         c.token_dtype = TrainTokenDtype::kU16;
       },
       "token_dtype:"},
  };
  for (const Case& k : cases) {
    Status s = ValidateWith(k.edit);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k.setting;
    EXPECT_THAT(s.message(), HasSubstr(k.setting)) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("; ")) << "says what to do: " << s.ToString();
  }
}

// Finding 12: a range error in a config ("lr: is -1") did not say which file
// or JSON path held it, as docs/DEEPSPEED_CONFIG.md promises.
TEST(ValidateTrainConfig, RangeErrorsNameTheConfigFileAndTheJsonPath) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": -1}}})",
       "ds.json: optimizer.params.lr: is -1;"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.0]}}})",
       "ds.json: optimizer.params.betas[1]: is 1;"},
      {R"({"gradient_clipping": -2})", "ds.json: gradient_clipping: is -2;"},
      {R"({"tierflow": {"lr": 0}})", "ds.json: tierflow.lr: is 0;"},
      {R"({"tierflow": {"eval_fraction": 1.5}})", "ds.json: tierflow.eval_fraction: is 1.5;"},
      {R"({"tierflow": {"checkpoint_every": -3}})", "ds.json: tierflow.checkpoint_every: is"},
      {R"({"tierflow": {"steps": 10, "trace_steps": [20]}})",
       "ds.json: tierflow.trace_steps: step 20 is outside the run"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": -0.5}}})",
       "ds.json: scheduler.params.warmup_min_lr: is -0.5;"},
      {R"({"fp16": {"enabled": true, "min_loss_scale": 0}})",
       "ds.json: fp16.min_loss_scale: is 0;"},
      {R"({"train_batch_size": 8, "tierflow": {"nvme_ratio": 0.5}})",
       "ds.json: tierflow.nvme_ratio: is 0.5"},
  };
  for (const auto& [json, where] : cases) {
    auto c = ParseTrainConfig(json, "ds.json", TrainConfig());
    ASSERT_TRUE(c.ok()) << json << ": " << c.status().ToString();
    const Status s = ValidateTrainConfig(*c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << json;
    EXPECT_EQ(s.message().rfind(where, 0), 0u) << json << ": " << s.message();
  }
  // A flag given over the config is where the value came from (tools/train_command.cc).
  auto c = ParseTrainConfig(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1}}})", "ds.json",
                            TrainConfig());
  ASSERT_TRUE(c.ok());
  c->lr = -1;
  c->origins["lr"] = "--lr";
  EXPECT_EQ(ValidateTrainConfig(*c).message().rfind("--lr: is -1;", 0), 0u)
      << ValidateTrainConfig(*c).message();
}

TEST(ValidateTrainConfig, Fp16KnobsAreOnlyCheckedForFp16) {
  EXPECT_TRUE(ValidateWith([](TrainConfig& c) {
                c.dtype = DType::kBF16;
                c.hysteresis = 0;
              }).ok());
}

// Issue 18: a 100000-deep DeepSpeed config overflowed the stack (and error
// messages serialized the offending value whole).
TEST(TrainConfig, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string m = ParseError("{\"train_batch_size\": 8, \"zero_optimization\": " + deep + "}");
  EXPECT_THAT(m, AllOf(HasSubstr("config.json"), HasSubstr("nested deeper than 64")));
  // Comments still parse around the limit check.
  EXPECT_THAT(ParseError("// c\n{\"a\": " + std::string(100000, '[')),
              HasSubstr("nested deeper than 64"));
}

TEST(TrainConfig, AWrongValueIsExcerptedNotDumpedWhole) {
  std::string big = "[";
  for (int i = 0; i < 100000; ++i) big += "1,";
  big += "1]";
  std::string m = ParseError("{\"gradient_clipping\": " + big + "}");
  EXPECT_THAT(m, HasSubstr("gradient_clipping"));
  EXPECT_LT(m.size(), 1000u);
}

}  // namespace
}  // namespace tierflow

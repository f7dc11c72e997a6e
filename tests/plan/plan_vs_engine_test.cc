// The planner against the engine it describes: a tiny GPT-2 and Llama train
// a step on the emulated CPU device through the OffloadEngine, and the
// measured peaks per tier (device accounting, pinned allocations, host
// state, NVMe swap files) must be within 10% of the plan's components; so
// must the host at the checkpoint moment (the state plus what a checkpoint
// holds while it streams the state out: the peak of the heap the save
// allocates, counted by this binary's operator new), with whole-unit and
// sliced gradient buckets.
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <unistd.h>
#include "tests/common/require.h"

#include "engine/offload_engine.h"
#include "engine/streamed_weights.h"
#include "model/checkpoint_offload.h"
#include "model/transformer.h"
#include "plan/hardware_profile.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "tierflow/device.h"
#include "train/checkpoint.h"

// Every heap allocation of this binary, counted (malloc's usable size), so
// the test can measure the peak a call allocates. The checkpoint's buffers
// are std::vectors; the engine's large buffers are mmap'd and not counted.
namespace {
std::atomic<uint64_t> g_heap_live{0};
std::atomic<uint64_t> g_heap_peak{0};
void* CountedAlloc(size_t n, size_t align) {
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n == 0 ? 1 : n)
                : std::aligned_alloc(align, (std::max<size_t>(n, 1) + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  const uint64_t live = g_heap_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  uint64_t peak = g_heap_peak.load();
  while (live > peak && !g_heap_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}
void CountedFree(void* p) {
  if (p == nullptr) return;
  g_heap_live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(size_t n) { return CountedAlloc(n, 0); }
void* operator new[](size_t n) { return CountedAlloc(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return CountedAlloc(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) {
  return CountedAlloc(n, static_cast<size_t>(a));
}
// The nothrow forms too (std::stable_sort's temporary buffer takes one):
// otherwise the sanitizer's new would meet the counted delete.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return CountedAlloc(n, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return CountedAlloc(n, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return CountedAlloc(n, static_cast<size_t>(a));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return CountedAlloc(n, static_cast<size_t>(a));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { CountedFree(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { CountedFree(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { CountedFree(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  CountedFree(p);
}
void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { CountedFree(p); }
void operator delete(void* p, std::align_val_t) noexcept { CountedFree(p); }
void operator delete[](void* p, std::align_val_t) noexcept { CountedFree(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { CountedFree(p); }

namespace tierflow {
namespace {

namespace fs = std::filesystem;

constexpr int kBatch = 2;
constexpr int kSeqLen = 32;
constexpr int64_t kSubGroup = 64 << 10;

void ExpectWithin10Percent(uint64_t measured, uint64_t planned, const std::string& what) {
  const double m = static_cast<double>(measured), p = static_cast<double>(planned);
  std::printf("  %-16s measured %12llu B, planned %12llu B, ratio %.3f\n", what.c_str(),
              static_cast<unsigned long long>(measured), static_cast<unsigned long long>(planned),
              p > 0 ? m / p : 0.0);
  EXPECT_NEAR(m, p, 0.10 * p) << what << ": measured " << measured << " B, planned " << planned
                              << " B";
}

uint64_t BytesUnder(const fs::path& dir) {
  uint64_t sum = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) sum += e.file_size();
  }
  return sum;
}

struct Case {
  std::string preset;
  OffloadPlacement offload;          // kHost or kNvme
  int grad_accum = 1;                // micro-batches per step: 1 lands them, more accumulate
  bool sliced = false;               // buckets of the largest tensor: units streamed in pieces
  bool offload_activations = false;  // the checkpoints in pinned host memory
  bool grads_on_nvme = false;        // the gradients beside the state on NVMe (needs kNvme)
};

// The planner's ring is the model's.
static_assert(kCheckpointDeviceSlots == model_internal::CheckpointOffload::kSlots);

class PlanVsEngine : public ::testing::TestWithParam<Case> {};

// What both tests plan: a tiny model at the engine's shape, bf16.
PlanInput TinyInput(const ModelConfig& config) {
  PlanInput in;
  in.model = config;
  in.micro_batch = kBatch;
  in.seq_len = kSeqLen;
  in.dtype = DType::kBF16;
  return in;
}

// A 1 GiB CPU device on a 2-core host with room for everything else.
Hardware TinyHardware() {
  Hardware hw;
  hw.device_memory_bytes = 1ull << 30;
  hw.host_memory_bytes = 64ull << 30;
  hw.nvme_capacity_bytes = 1ull << 40;
  hw.cores = 2;
  hw.bandwidths = DefaultBandwidths(false, 2);
  return hw;
}

StatusOr<std::unique_ptr<Device>> CpuDeviceOf(const Hardware& hw) {
  DeviceOptions dopt;
  dopt.kind = DeviceChoice::kCpu;
  dopt.memory_capacity_bytes = hw.device_memory_bytes;
  return CreateDevice(dopt);
}

TEST_P(PlanVsEngine, MeasuredPeaksWithinTenPercentOfThePlan) {
  const Case& c = GetParam();
  ModelConfig config = *PresetModelConfig(c.preset);

  PlanInput in = TinyInput(config);
  in.checkpointing = true;
  in.offload = c.offload;
  in.grad_accum = c.grad_accum;
  in.sub_group_params = kSubGroup;
  if (c.sliced) in.grad_bucket_params = GradBucketSizesOf(config).tensors;
  in.offload_activations =
      c.offload_activations ? ActivationOffload::kHost : ActivationOffload::kNone;
  in.offload_gradients = c.grads_on_nvme ? GradOffload::kNvme : GradOffload::kHost;
  const Hardware hw = TinyHardware();
  auto plan_or = ComputePlan(in, hw);
  ASSERT_TRUE(plan_or.ok()) << plan_or.status().ToString();
  const Plan& plan = *plan_or;

  auto device_or = CpuDeviceOf(hw);
  ASSERT_TRUE(device_or.ok()) << device_or.status().ToString();
  Device& device = **device_or;

  TrainShape shape;
  shape.batch = kBatch;
  shape.seq_len = kSeqLen;
  shape.checkpoint_activations = true;
  shape.dtype = DType::kBF16;
  shape.offload_checkpoints = c.offload_activations;
  auto model_or = TransformerModel::Create(device, config, shape);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();

  const fs::path dir =
      fs::temp_directory_path() / ("tierflow_plan_vs_engine_" + std::to_string(::getpid()) + "_" +
                                   c.preset + "_" + std::string(OffloadPlacementName(c.offload)));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EngineOptions options;
  options.weights_dtype = DType::kBF16;
  options.sub_group_params = static_cast<uint64_t>(kSubGroup);
  options.offload = plan.placement.offload();
  options.nvme_ratio = plan.placement.nvme_ratio;
  options.nvme_paths = {dir.string()};
  options.buffer_count = plan.placement.buffer_count;
  options.grad_buckets = plan.placement.grad_buckets;
  options.grad_bucket_params = static_cast<uint64_t>(plan.placement.grad_bucket_params);
  options.speculation_params = static_cast<uint64_t>(plan.placement.speculation_params);
  options.grad_transfer_dtype = plan.grad_transfer_dtype;
  options.micro_batches_per_step = c.grad_accum;
  options.grad_offload = plan.placement.gradients;
  if (c.grads_on_nvme) {
    ASSERT_EQ(plan.placement.gradients, GradOffload::kNvme);
    options.grad_spill_slots = plan.placement.grad_spill_slots;
  }
  auto engine_or = OffloadEngine::Create(device, **model_or, options);
  if (!engine_or.ok() && engine_or.status().code() == StatusCode::kUnavailable) {
    fs::remove_all(dir);
    TIERFLOW_SKIP_WITHOUT("nvme") << "NVMe tier unavailable here: "
                                  << engine_or.status().ToString();
  }
  ASSERT_TRUE(engine_or.ok()) << engine_or.status().ToString();
  OffloadEngine& engine = **engine_or;
  const uint64_t swap_bytes = BytesUnder(dir);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int> token(0, static_cast<int>(config.vocab_size) - 1);
  std::vector<int32_t> inputs(kBatch * kSeqLen), targets(kBatch * kSeqLen);
  StatusOr<StepStats> stats = Status(StatusCode::kInternal, "no step ran");
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i] = token(rng);
      targets[i] = token(rng);
    }
    MicroBatch mb;
    mb.inputs = inputs.data();
    mb.targets = targets.data();
    mb.batch = kBatch;
    mb.seq_len = kSeqLen;
    stats = engine.Step(std::vector<MicroBatch>(static_cast<size_t>(c.grad_accum), mb));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  }
  stats = engine.Finish();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();

  ExpectWithin10Percent(stats->device_peak_bytes, plan.device.total_bytes(), "device");
  ExpectWithin10Percent(stats->pinned_peak_bytes, plan.pinned_bytes, "pinned host");
  EXPECT_EQ((*model_or)->checkpoint_host_bytes(), plan.activations.host_checkpoints);
  EXPECT_EQ((*model_or)->activation_bytes(), plan.activations.total());
  if (c.offload == OffloadPlacement::kHost) {
    ExpectWithin10Percent(
        stats->host_state_bytes,
        plan.host.bytes_of("master_weights") + plan.host.bytes_of("optimizer_moments"),
        "host state");
  } else {
    EXPECT_EQ(stats->host_state_bytes, 0u);
    ExpectWithin10Percent(swap_bytes, plan.nvme.total_bytes(), "NVMe swap files");
  }

  // The checkpoint moment: the state stays where it is, and the checkpoint
  // streams it out through its buffers. Peak RSS growth (reset first) over
  // the save measures them.
  const fs::path out = dir / "out";
  fs::create_directories(out);
  CheckpointState state;
  state.step = 2;
  state.model = c.preset;
  const uint64_t live_before = g_heap_live.load();
  g_heap_peak.store(live_before);
  Status saved = SaveTrainingCheckpoint(out.string(), engine, (*model_or)->layout(), state);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  const uint64_t buffers = g_heap_peak.load() - live_before;
  ExpectWithin10Percent(buffers, plan.host.bytes_of("checkpoint_buffers"), "checkpoint heap");
  const uint64_t steady_planned = plan.pinned_bytes + plan.host.bytes_of("master_weights") +
                                  plan.host.bytes_of("optimizer_moments");
  const uint64_t steady_measured = stats->pinned_peak_bytes + stats->host_state_bytes;
  ExpectWithin10Percent(steady_measured + buffers,
                        steady_planned + plan.host.bytes_of("checkpoint_buffers"),
                        "host at checkpoint");
  engine_or = Status(StatusCode::kAborted, "closed");  // closes the swap set before cleanup
  fs::remove_all(dir);
}

// Streamed weights on NVMe: what the engine's StreamedWeights holds on the
// host (staging and write-back buffers) and in its swap files (the units'
// blocks, spare blocks and headers) is what the plan counts for them.
TEST(PlanVsEngineStreamed, NvmeCopyIsWhatThePlanCounts) {
  const ModelConfig config = *PresetModelConfig("tiny-llama");
  PlanInput in = TinyInput(config);
  in.param_offload = ParamOffload::kNvme;
  in.nvme_block_bytes = 64 << 10;  // blocks small beside the tiny units
  const Hardware hw = TinyHardware();
  auto plan_or = ComputePlan(in, hw);
  ASSERT_TRUE(plan_or.ok()) << plan_or.status().ToString();
  const Plan& plan = *plan_or;
  const ParamPlacement& pp = plan.placement.params;
  ASSERT_EQ(pp.where, ParamOffload::kNvme);

  auto device = CpuDeviceOf(hw);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  TrainShape shape;
  shape.batch = kBatch;
  shape.seq_len = kSeqLen;
  shape.dtype = DType::kBF16;
  auto model = TransformerModel::Create(**device, config, shape);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const fs::path dir =
      fs::temp_directory_path() / ("tierflow_plan_vs_streamed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    StreamedWeights::Config wc;
    wc.params.where = pp.where;
    wc.params.streamed_units = pp.streamed_units;
    wc.params.device_slots = pp.device_slots;
    wc.params.prefetch_depth = pp.prefetch_depth;
    wc.params.nvme_staging = pp.nvme_staging;
    wc.nvme.paths = {dir.string()};
    wc.nvme.buffered = true;
    wc.nvme.io.block_size_bytes = static_cast<uint32_t>(in.nvme_block_bytes);
    auto w = StreamedWeights::Create(**device, (*model)->Units(), (*model)->WeightsSchedule(), wc);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ExpectWithin10Percent(
        (*w)->HostBytes(),
        plan.host.bytes_of("weight_staging") + plan.host.bytes_of("weight_write_back"),
        "host buffers");
    EXPECT_GT(plan.host.bytes_of("weight_write_back"), 0u);
    ExpectWithin10Percent(
        BytesUnder(dir),
        plan.nvme.bytes_of("streamed_weights") + plan.nvme.bytes_of("streamed_weights_spare"),
        "swap files");
  }
  fs::remove_all(dir);
}

// The planner's activation arena is the model's allocation, byte for byte:
// with checkpointing on and off, the MLP untiled and in row tiles (one that
// divides N, one that does not, one larger than N).
TEST(PlanVsEngineActivations, ArenaEqualsTheModelsAllocation) {
  for (const char* preset : {"tiny-gpt2", "tiny-llama"}) {
    const ModelConfig config = *PresetModelConfig(preset);
    for (bool ckpt : {false, true}) {
      for (int64_t tile : {0, 256, 512, 1 << 20}) {
        const int seq_len = static_cast<int>(std::min<int64_t>(config.max_seq_len, 256));
        const TrainShape shape{
            .batch = 3, .seq_len = seq_len, .checkpoint_activations = ckpt, .mlp_tile_rows = tile};
        const ActivationOptions o{.micro_batch = 3,
                                  .seq_len = seq_len,
                                  .dtype = shape.dtype,
                                  .checkpointing = ckpt,
                                  .mlp_tile_rows = tile};
        EXPECT_EQ(ComputeActivationBytes(config, o).total(),
                  TransformerModel::ActivationBytes(config, shape))
            << preset << (ckpt ? " checkpointed" : "") << " tile " << tile;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, PlanVsEngine,
    ::testing::Values(Case{"tiny-gpt2", OffloadPlacement::kHost},
                      Case{"tiny-llama", OffloadPlacement::kHost},
                      Case{"tiny-gpt2", OffloadPlacement::kNvme},
                      Case{"tiny-llama", OffloadPlacement::kNvme},
                      Case{"tiny-llama", OffloadPlacement::kHost, 2},
                      Case{"tiny-llama", OffloadPlacement::kHost, 1, true},
                      Case{"tiny-gpt2", OffloadPlacement::kNvme, 1, true},
                      Case{"tiny-llama", OffloadPlacement::kHost, 2, false, true},
                      Case{"tiny-llama", OffloadPlacement::kNvme, 1, false, false, true},
                      Case{"tiny-gpt2", OffloadPlacement::kNvme, 3, false, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.preset + "_" +
                         std::string(OffloadPlacementName(info.param.offload)) +
                         (info.param.grad_accum > 1 ? "_accumulating" : "") +
                         (info.param.sliced ? "_sliced" : "") +
                         (info.param.offload_activations ? "_offloaded_checkpoints" : "") +
                         (info.param.grads_on_nvme ? "_grads_on_nvme" : "");
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace tierflow

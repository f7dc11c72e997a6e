// What the engine tests share: the linear-stack model's data, a CPU device,
// and a training run through the OffloadEngine that returns everything the
// tests compare (optimizer state, per-step statistics, device weights).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine_options.h"
#include "tierflow/device.h"

namespace tierflow::testing_util {

inline constexpr int kLayers = 4;
inline constexpr int kDim = 24;

struct Data {
  std::vector<std::vector<float>> x, y;  // per step: (batch, kDim)
};

// `steps` batches of `batch` normal inputs and targets 0.5 sin(x).
Data MakeData(int steps, int batch, uint32_t seed);

std::unique_ptr<Device> CpuDevice(uint64_t capacity = 256ull << 20);

// The linear-stack test options: fp32 weights, AdamW at lr 1e-2 with weight
// decay, sub-groups of 200 parameters (several per layer).
EngineOptions BaseOptions();

struct RunResult {
  // Every sub-group's master, exp_avg, exp_avg_sq, concatenated in sub-group order.
  std::vector<float> state;
  std::vector<StepStats> stats;
  StepStats finish;                   // Finish()'s: the run's NVMe bytes, peaks and stage times
  std::vector<float> device_weights;  // the device working weights, as fp32
};

// Trains a LinearStack(kLayers, kDim, options.weights_dtype, seed 7) for one
// step per batch of `data`, each batch cut into `micro_batches`. Failures are
// test failures (the result is then partial).
RunResult Train(const EngineOptions& options, const Data& data, int micro_batches = 1);

}  // namespace tierflow::testing_util

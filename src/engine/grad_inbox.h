// The gradient inbox: where the model's gradients go and how they reach the
// host. A pool of device buckets (fp32, accumulated with +=; a transfer-dtype
// buffer when the wire is 16-bit), each piece's statistics on the device, and
// the host side of the landing, whose shape depends on the step:
//   kLanded       one micro-batch: D2H straight into a pinned buffer of the
//                 whole model in the transfer dtype, statistics beside it
//   kAccumulated  several: each bucket lands in its pinned staging, summed
//                 into a pageable fp32 accumulator (resident huge pages)
//   kEither       any number (0): staging, and one pinned fp32 buffer that is
//                 the landing with one micro-batch and the accumulator with more
//   kGathered     data parallelism, several per rank: staging, gathered whole
//                 per unit (transfer dtype) for the ranks' sum
//   kStaged       gradients on the drives (engine/grad_spill.h): each bucket
//                 lands in its pinned staging and nothing whole is kept
//   kNone         device collectives: summed where backward leaves it
//
// Threads: the compute thread takes a free bucket (BeginGrads) and enqueues
// its transfer (EndGrads); the worker reads what landed and frees the bucket.
// Which buckets are busy is guarded by the engine's mutex (TakeFree and Free
// REQUIRE it held); the landing buffers are written by D2H before the
// worker's arrival and read by the worker alone after it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/host_memory.h"
#include "tierflow/device.h"

namespace tierflow {

enum class GradLanding { kLanded, kAccumulated, kEither, kGathered, kStaged, kNone };

class GradInbox {
 public:
  struct Config {
    uint64_t bucket_params = 0;  // > 0
    int buckets = 3;             // >= 1
    DType transfer_dtype = DType::kF32;
    GradLanding landing = GradLanding::kLanded;
  };
  struct Bucket {
    DeviceBuffer grads;    // (bucket_params,) fp32 on the device
    DeviceBuffer wire;     // (bucket_params,) transfer dtype; empty when that is fp32
    PinnedBuffer staging;  // (bucket_params,) transfer dtype, D2H target; empty when landed
    std::unique_ptr<Event> filled;
    // What crosses PCIe: the fp32 gradients or their cast.
    const void* sent() const { return wire.data() != nullptr ? wire.data() : grads.data(); }
  };
  // Allocates the buckets and the landing for a model of `model_params`;
  // out-of-memory names the buffer.
  static StatusOr<std::unique_ptr<GradInbox>> Create(Device& device, uint64_t model_params,
                                                     const Config& config);

  uint64_t bucket_params() const { return config_.bucket_params; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  Bucket& bucket(int b) { return buckets_[static_cast<size_t>(b)]; }
  GradLanding landing() const { return config_.landing; }
  DType transfer_dtype() const { return config_.transfer_dtype; }
  // Bytes per parameter crossing PCIe.
  size_t tbytes() const { return DTypeSize(config_.transfer_dtype); }

  // REQUIRES (both): the engine's mutex held. A free bucket, now busy (-1:
  // none is free); a busy bucket whose contents the host has consumed.
  int TakeFree();
  void Free(int b);
  int busy_buckets() const;

  // The whole model's landed gradients from `offset` (kLanded, kEither with
  // one micro-batch), in the transfer dtype.
  char* Landed(uint64_t offset) { return landed_.as<char>() + offset * tbytes(); }
  // The fp32 accumulator (kAccumulated, kEither).
  float* Accumulator() {
    return accumulator_.data() != nullptr ? accumulator_.as<float>() : landed_.as<float>();
  }
  // The units gathered for the ranks' sum (kGathered), from `offset`.
  char* Gathered(uint64_t offset) { return gathered_.as<char>() + offset * tbytes(); }
  // Bucket b's piece's statistics on the device, landed on the host, and the
  // device scratch of their reduction (compute stream only).
  GradSquares* DeviceStats(int b) { return stats_device_.as<GradSquares>() + b; }
  const GradSquares& HostStats(int b) const { return stats_host_.as<GradSquares>()[b]; }
  GradSquares* HostStatsTarget(int b) { return stats_host_.as<GradSquares>() + b; }
  double* StatsScratch() { return stats_scratch_.as<double>(); }

 private:
  explicit GradInbox(const Config& config) : config_(config) {}
  Status AllocateLanding(Device& device, uint64_t model_params);

  Config config_;
  std::vector<Bucket> buckets_;
  std::vector<char> busy_;  // per bucket; guarded by the engine's mutex
  DeviceBuffer stats_device_, stats_scratch_;
  PinnedBuffer stats_host_;
  // The step's gradients never need two of these at once: the next
  // backward cannot begin before this step's last update reads them.
  PinnedBuffer landed_;
  HostPages accumulator_;
  HostPages gathered_;
};

}  // namespace tierflow

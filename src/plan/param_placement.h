// Parameter offload (ZeRO-Infinity) in the planner: which units' 16-bit
// working weights stream through a ring of device slots instead of staying
// resident, and what that costs per micro-batch. ComputePlan
// (plan/planner.cc) sizes the tiers; this file holds the unit arithmetic and
// the choice of the streamed set (docs/PLANNER.md, "Parameter offload").
//
// Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "plan/planner.h"
#include "tierflow/model_config.h"
#include "tierflow/param_offload.h"

namespace tierflow {

// The ring's slots when --param-slots is not given: one unit in use and two
// fetches ahead (prefetch depth = slots - 1). The engine accepts 2 and more.
inline constexpr int kDefaultParamSlots = 3;
// kNvme: pinned staging buffers between the drive and the slots
// (EngineOptions::params.nvme_staging's default).
inline constexpr int kDefaultNvmeStaging = 2;

// The model's units as parameter offload sees them: unit 0 the embeddings,
// units 1..layers the blocks (identical), unit layers + 1 the head (the
// final norm and an untied LM head).
struct ModelUnits {
  int64_t embeddings = 0;
  int64_t block = 0;
  int64_t head = 0;
  int64_t layers = 0;
  // A tied head's matmuls take the embeddings: one more fetch of them.
  bool tied = false;
  int64_t total() const;  // the model's parameters
};
ModelUnits ModelUnitsOf(const ModelConfig& model);

// Fetches of one unit per micro-batch (Trainable::WeightsSchedule of the
// transformer): a block twice (forward, then recompute and backward), the
// head once (its backward runs while forward still holds it), the
// embeddings once, twice when the head is tied to them.
inline constexpr int64_t kBlockFetchesPerMicroBatch = 2;
inline constexpr int64_t kHeadFetchesPerMicroBatch = 1;
inline int64_t EmbeddingFetchesPerMicroBatch(bool tied) { return tied ? 2 : 1; }

// One set of streamed units the planner considers: `blocks` of the blocks,
// spread evenly over the depth (StreamedBlockIndices), and optionally the
// embeddings and the head.
struct StreamCandidate {
  int64_t blocks = 0;
  bool embeddings = false;
  bool head = false;
  bool streams() const { return blocks > 0 || embeddings || head; }
};

// Block indices (0-based, ascending) when `streamed` of `layers` blocks
// stream: floor((i + 0.5) * layers / streamed), i = 0..streamed-1, so that
// resident blocks' compute sits between streamed blocks' uploads.
// REQUIRES: 0 <= streamed <= layers.
std::vector<int> StreamedBlockIndices(int64_t layers, int64_t streamed);

// Parameter counts of a candidate.
struct StreamCost {
  int64_t resident = 0;         // parameters kept on the device
  int64_t streamed = 0;         // parameters in the host or NVMe copy
  int64_t slot = 0;             // the largest streamed unit (one slot)
  int64_t fetched = 0;          // parameters uploaded per micro-batch
  int64_t fetched_forward = 0;  // ... of them before the loss (forward)
  int64_t streamed_units = 0;   // how many units stream
};
StreamCost CostOf(const ModelUnits& units, const StreamCandidate& candidate);

// Every candidate with at least one streamed block, least fetched
// parameters per micro-batch first (ties: fewer streamed parameters, then
// fewer units). Sets without a block are left out: their slots cost at
// least what leaving those units on the device costs (slots >= 2, each as
// large as the largest streamed unit), so they never lower the device's use.
std::vector<StreamCandidate> StreamCandidates(const ModelUnits& units);

// The placement of a candidate, in EngineOptions::params' terms: the unit
// indices, the counts, `slots` slots with prefetch depth slots - 1, the
// NVMe staging and the bytes fetched per micro-batch. where = kNone (or a
// candidate that streams nothing) gives the all-resident placement.
ParamPlacement DescribeStreaming(const ModelUnits& units, const StreamCandidate& candidate,
                                 ParamOffload where, int slots, uint64_t dtype_bytes);

// NVMe bytes of the streamed copy: each streamed unit's weights rounded up
// to whole blocks of `block_bytes`.
uint64_t StreamedNvmeBytes(const ModelUnits& units, const ParamPlacement& params,
                           uint64_t dtype_bytes, uint64_t block_bytes);

// The device layout the planner picks: the gradient bucket and which units
// stream (candidate.streams() false: none).
struct DeviceLayout {
  int64_t bucket_params = 0;
  StreamCandidate streamed;
};

// Device bytes of a layout with `resident` parameters on the device, a
// ring of `slots` slots of `slot` parameters (0, 0 when nothing streams)
// and gradient buckets of `bucket` parameters.
using DeviceBytesFn =
    std::function<uint64_t(int64_t resident, int64_t slot, int slots, int64_t bucket)>;

// The choice (docs/PLANNER.md, "Parameter offload"). `buckets` are the
// gradient bucket sizes to try, largest first (one when the user gave it);
// `target` the device bytes to stay within (kDeviceTargetFraction of it).
//   kNone: nothing streams; the largest bucket within the target, else the
//     smallest (the bucket rule as it was).
//   kAuto: the same while everything resident fits within the target; else
//     the candidates in StreamCandidates' order (least traffic first), each
//     with the buckets largest first: the first within the target. A
//     smaller bucket costs at most the head's second pass over its logits;
//     a streamed block costs its upload every micro-batch, so buckets
//     shrink before more streams.
//   kHost / kNvme: as kAuto without the all-resident step: at least one
//     block streams even when everything fits (the least traffic that does).
//   Nothing within the target: the smallest bucket and the layout with the
//     least device bytes (all-resident included for kAuto; ties: the less
//     traffic), so that the margin is kept as far as it can be.
DeviceLayout ChooseDeviceLayout(ParamOffload requested, const ModelUnits& units,
                                const std::vector<int64_t>& buckets, int slots, double target,
                                const DeviceBytesFn& device_bytes);

// Forward's share of the fetched bytes (0 when nothing streams).
double ForwardFetchShare(const ParamPlacement& params, const ModelUnits& units);

// "0, 2-5, 7": unit indices as ranges, for reports.
std::string FormatUnitList(const std::vector<int>& units);

}  // namespace tierflow

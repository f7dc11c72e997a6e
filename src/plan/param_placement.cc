// Parameter offload's unit arithmetic and the choice of the streamed set.
#include "plan/param_placement.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "common/checked_math.h"

namespace tierflow {
namespace {

uint64_t U(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

}  // namespace

int64_t ModelUnits::total() const {
  return SaturatingAdd(SaturatingAdd(embeddings, SaturatingMul(layers, block)), head);
}

ModelUnits ModelUnitsOf(const ModelConfig& model) {
  ModelUnits u;
  u.embeddings = EmbeddingParameterCount(model);
  u.block = LayerParameterCount(model);
  u.head = HeadParameterCount(model);
  u.layers = model.n_layers;
  u.tied = model.tie_embeddings;
  return u;
}

std::vector<int> StreamedBlockIndices(int64_t layers, int64_t streamed) {
  std::vector<int> out;
  if (streamed <= 0 || layers <= 0) return out;
  streamed = std::min(streamed, layers);
  out.reserve(static_cast<size_t>(streamed));
  // floor((i + 0.5) * L / k) = floor((2i + 1) L / 2k): exact in integers.
  // Consecutive values differ by at least L / k >= 1, so they are distinct.
  for (int64_t i = 0; i < streamed; ++i) {
    out.push_back(static_cast<int>((2 * i + 1) * layers / (2 * streamed)));
  }
  return out;
}

StreamCost CostOf(const ModelUnits& u, const StreamCandidate& c) {
  StreamCost cost;
  const int64_t blocks = std::clamp<int64_t>(c.blocks, 0, u.layers);
  const int64_t embedding_fetches = EmbeddingFetchesPerMicroBatch(u.tied);
  cost.streamed = SaturatingMul(blocks, u.block);
  cost.fetched = SaturatingMul(blocks, SaturatingMul(kBlockFetchesPerMicroBatch, u.block));
  cost.fetched_forward = cost.streamed;  // each block once before the loss
  cost.streamed_units = blocks;
  if (blocks > 0) cost.slot = u.block;
  if (c.embeddings) {
    cost.streamed = SaturatingAdd(cost.streamed, u.embeddings);
    // Forward takes them for the lookup and, tied, again for the head.
    cost.fetched = SaturatingAdd(cost.fetched, SaturatingMul(embedding_fetches, u.embeddings));
    cost.fetched_forward =
        SaturatingAdd(cost.fetched_forward, SaturatingMul(embedding_fetches, u.embeddings));
    cost.slot = std::max(cost.slot, u.embeddings);
    ++cost.streamed_units;
  }
  if (c.head) {
    cost.streamed = SaturatingAdd(cost.streamed, u.head);
    cost.fetched = SaturatingAdd(cost.fetched, SaturatingMul(kHeadFetchesPerMicroBatch, u.head));
    cost.fetched_forward = SaturatingAdd(cost.fetched_forward, u.head);
    cost.slot = std::max(cost.slot, u.head);
    ++cost.streamed_units;
  }
  cost.resident = u.total() - cost.streamed;
  return cost;
}

std::vector<StreamCandidate> StreamCandidates(const ModelUnits& u) {
  std::vector<StreamCandidate> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(u.layers, 0)) * 4);
  for (int64_t k = 1; k <= u.layers; ++k) {
    for (const bool embeddings : {false, true}) {
      for (const bool head : {false, true}) out.push_back({k, embeddings, head});
    }
  }
  // Stable: equal keys keep the order above (fewer blocks, then without the
  // embeddings, then without the head).
  std::stable_sort(out.begin(), out.end(), [&](const StreamCandidate& a, const StreamCandidate& b) {
    const StreamCost ca = CostOf(u, a), cb = CostOf(u, b);
    return std::tie(ca.fetched, ca.streamed, ca.streamed_units) <
           std::tie(cb.fetched, cb.streamed, cb.streamed_units);
  });
  return out;
}

ParamPlacement DescribeStreaming(const ModelUnits& u, const StreamCandidate& c, ParamOffload where,
                                 int slots, uint64_t dtype_bytes) {
  ParamPlacement p;
  if (where == ParamOffload::kNone || where == ParamOffload::kAuto || !c.streams()) {
    p.where = ParamOffload::kNone;
    p.resident_params = u.total();
    return p;
  }
  const StreamCost cost = CostOf(u, c);
  p.where = where;
  if (c.embeddings) p.streamed_units.push_back(0);
  for (int block : StreamedBlockIndices(u.layers, c.blocks)) p.streamed_units.push_back(block + 1);
  if (c.head) p.streamed_units.push_back(static_cast<int>(u.layers + 1));
  p.resident_params = cost.resident;
  p.streamed_params = cost.streamed;
  p.slot_params = cost.slot;
  p.device_slots = slots;
  p.prefetch_depth = slots - 1;
  // The engine's default; only kNvme reads through (and allocates) them.
  p.nvme_staging = kDefaultNvmeStaging;
  p.fetch_bytes_per_micro_batch = SaturatingMul(U(cost.fetched), dtype_bytes);
  return p;
}

uint64_t StreamedNvmeBytes(const ModelUnits& u, const ParamPlacement& p, uint64_t dtype_bytes,
                           uint64_t block_bytes) {
  auto rounded = [&](int64_t params) {
    const uint64_t bytes = SaturatingMul(U(params), dtype_bytes);
    return SaturatingAdd(bytes, block_bytes - 1) / block_bytes * block_bytes;
  };
  uint64_t total = 0;
  for (int unit : p.streamed_units) {
    const int64_t params = unit == 0 ? u.embeddings : unit == u.layers + 1 ? u.head : u.block;
    total = SaturatingAdd(total, rounded(params));
  }
  return total;
}

DeviceLayout ChooseDeviceLayout(ParamOffload requested, const ModelUnits& units,
                                const std::vector<int64_t>& buckets, int slots, double target,
                                const DeviceBytesFn& device_bytes) {
  const int64_t all = units.total();
  auto fits = [&](uint64_t bytes) { return static_cast<double>(bytes) <= target; };
  // Everything resident, the largest bucket that keeps the margin.
  if (requested == ParamOffload::kNone || requested == ParamOffload::kAuto) {
    for (int64_t bucket : buckets) {
      if (fits(device_bytes(all, 0, 0, bucket))) return {bucket, {}};
    }
    if (requested == ParamOffload::kNone) return {buckets.back(), {}};
  }
  // The least traffic that keeps the margin; buckets shrink before more streams.
  const std::vector<StreamCandidate> candidates = StreamCandidates(units);
  for (const StreamCandidate& c : candidates) {
    const StreamCost cost = CostOf(units, c);
    for (int64_t bucket : buckets) {
      if (fits(device_bytes(cost.resident, cost.slot, slots, bucket))) return {bucket, c};
    }
  }
  // Nothing keeps it: the least device memory, with the smallest bucket.
  const int64_t smallest = buckets.back();
  DeviceLayout best{smallest, {}};
  bool have = false;
  uint64_t best_bytes = 0;
  if (requested == ParamOffload::kAuto) {
    best_bytes = device_bytes(all, 0, 0, smallest);
    have = true;
  }
  for (const StreamCandidate& c : candidates) {
    const StreamCost cost = CostOf(units, c);
    const uint64_t bytes = device_bytes(cost.resident, cost.slot, slots, smallest);
    if (!have || bytes < best_bytes) {
      have = true;
      best_bytes = bytes;
      best.streamed = c;
    }
  }
  return best;
}

double ForwardFetchShare(const ParamPlacement& p, const ModelUnits& u) {
  if (p.streamed_units.empty()) return 0;
  int64_t forward = 0, all = 0;
  for (int unit : p.streamed_units) {
    if (unit == 0) {
      const int64_t fetched = EmbeddingFetchesPerMicroBatch(u.tied) * u.embeddings;
      forward += fetched;
      all += fetched;
    } else if (unit == u.layers + 1) {
      forward += u.head;
      all += u.head;
    } else {
      forward += u.block;
      all += kBlockFetchesPerMicroBatch * u.block;
    }
  }
  return all > 0 ? static_cast<double>(forward) / static_cast<double>(all) : 0;
}

std::string FormatUnitList(const std::vector<int>& units) {
  std::string out;
  for (size_t i = 0; i < units.size();) {
    size_t j = i;
    while (j + 1 < units.size() && units[j + 1] == units[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(units[i]);
    if (j > i) out += "-" + std::to_string(units[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace tierflow

// Parameter offload in `tierflow bench engine`.
#include "bench/engine_bench_params.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "engine/streamed_weights.h"

namespace tierflow {
namespace {

Status BadList(std::string_view flag, std::string_view text, const std::string& why) {
  return InvalidArgumentError(std::string(flag) + ": '" + std::string(text) + "' " + why +
                              "; give unit indices such as 1,3,5 or 2-5,7");
}

// A non-negative decimal integer, the whole of `t` (spaces around it allowed).
bool ParseIndex(std::string_view t, int* out) {
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  if (t.empty() || t.size() > 9) return false;
  int v = 0;
  for (char c : t) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

StatusOr<std::vector<int>> ParseUnitList(std::string_view flag, std::string_view text) {
  std::vector<int> units;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      if (!ParseIndex(item, &lo)) return BadList(flag, text, "is not a list of unit indices");
      hi = lo;
    } else if (!ParseIndex(item.substr(0, dash), &lo) || !ParseIndex(item.substr(dash + 1), &hi)) {
      return BadList(flag, text, "is not a list of unit indices");
    } else if (hi < lo) {
      return BadList(flag, text, "has a range that runs backwards");
    }
    for (int u = lo; u <= hi; ++u) units.push_back(u);
    start = comma + 1;
  }
  return units;
}

Status CheckBenchStreaming(const ParamStreaming& p, const std::vector<std::string>& nvme_paths) {
  if (p.where == ParamOffload::kAuto) {
    // The bench measures one fixed placement; choosing one is the planner's job.
    return InvalidArgumentError(
        "--offload-param: auto is not supported here; use none, host or nvme");
  }
  if (p.where == ParamOffload::kNone) {
    if (!p.streamed_units.empty()) {
      return InvalidArgumentError(
          "--streamed-units: nothing streams with --offload-param none; add --offload-param host "
          "or nvme");
    }
    return Status::Ok();
  }
  if (p.device_slots < 2) {
    return InvalidArgumentError("--param-slots: " + std::to_string(p.device_slots) +
                                " device slots; at least 2 (one in use, one being filled)");
  }
  if (p.prefetch_depth < 1 || p.prefetch_depth > p.device_slots - 1) {
    return InvalidArgumentError(
        "--param-slots: a prefetch depth of " + std::to_string(p.prefetch_depth) + " needs 1.." +
        std::to_string(p.device_slots - 1) + " with " + std::to_string(p.device_slots) + " slots");
  }
  if (p.where == ParamOffload::kNvme && nvme_paths.empty()) {
    return InvalidArgumentError("--offload-param nvme needs --nvme-path DIR");
  }
  return Status::Ok();
}

Status ResolveBenchStreaming(int num_units, const std::vector<int>& blocks,
                             const std::vector<std::string>& nvme_paths, ParamStreaming* params) {
  ParamStreaming& p = *params;
  TF_RETURN_IF_ERROR(CheckBenchStreaming(p, nvme_paths));
  if (p.where == ParamOffload::kNone) return Status::Ok();
  if (p.streamed_units.empty()) {
    for (size_t i = 1; i < blocks.size(); i += 2) p.streamed_units.push_back(blocks[i]);
    if (p.streamed_units.empty()) {
      return InvalidArgumentError("--offload-param " + std::string(ParamOffloadName(p.where)) +
                                  ": the model has one block, none to stream every other of; "
                                  "name the units with --streamed-units");
    }
    return Status::Ok();
  }
  std::vector<char> seen(static_cast<size_t>(num_units), 0);
  for (int u : p.streamed_units) {
    if (u < 0 || u >= num_units) {
      return InvalidArgumentError("--streamed-units: unit " + std::to_string(u) +
                                  " is not one of the model's " + std::to_string(num_units) +
                                  " units (0.." + std::to_string(num_units - 1) + ")");
    }
    if (seen[static_cast<size_t>(u)]++) {
      return InvalidArgumentError("--streamed-units: unit " + std::to_string(u) +
                                  " is listed twice");
    }
  }
  return Status::Ok();
}

StatusOr<ParamStageResult> MeasureParamStage(Device& device, const std::vector<UnitInfo>& units,
                                             const std::vector<int>& schedule,
                                             const EngineOptions& eo) {
  StreamedWeights::Config wc;
  wc.params = eo.params;
  wc.dtype = eo.weights_dtype;
  wc.nvme = SwapSetOf(eo);
  TF_ASSIGN_OR_RETURN(auto ring, StreamedWeights::Create(device, units, schedule, wc));
  // The copy's contents do not change an upload's cost: zeros.
  std::vector<char> zeros(ring->slot_params() * DTypeSize(eo.weights_dtype), 0);
  for (int u : eo.params.streamed_units) {
    TF_RETURN_IF_ERROR(ring->WriteRange(u, 0, zeros.data(), units[u].num_params));
    TF_RETURN_IF_ERROR(ring->FinishUnit(u));
  }
  TF_RETURN_IF_ERROR(ring->Flush());
  TF_ASSIGN_OR_RETURN(auto compute, device.CreateStream("bench params"));
  auto pass = [&]() -> Status {
    TF_RETURN_IF_ERROR(ring->BeginPass(1, [](int, bool) -> StatusOr<bool> { return true; }));
    for (int u : schedule) {
      if (!ring->streamed(u)) continue;
      TF_RETURN_IF_ERROR(ring->Take(u, *compute).status());
      TF_RETURN_IF_ERROR(ring->Release(u, *compute));
    }
    TF_RETURN_IF_ERROR(ring->EndPass());
    return compute->Synchronize();
  };
  TF_RETURN_IF_ERROR(pass());
  ring->TakeTransferred();
  const auto t0 = std::chrono::steady_clock::now();
  TF_RETURN_IF_ERROR(pass());
  ParamStageResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StreamedWeights::Transferred t = ring->TakeTransferred();
  r.h2d_bytes = t.h2d_bytes;
  r.nvme_read_bytes = t.nvme_read_bytes;
  return r;
}

}  // namespace tierflow

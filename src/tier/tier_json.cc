// `tierflow tier ls --json` / `tier verify --json`.
#include "tier/tier_json.h"

#include <string>

namespace tierflow::tier {
namespace {

using Json = nlohmann::json;

const char* PathKindName(PathKind k) {
  switch (k) {
    case PathKind::kOutputDir:
      return "output_dir";
    case PathKind::kCheckpoint:
      return "checkpoint";
    case PathKind::kSwapDir:
      return "swap_dir";
    case PathKind::kUnknown:
      break;
  }
  return "unknown";
}

Json CheckpointToJson(const CheckpointListing& c, bool verified) {
  Json j = {
      {"path", c.info.path},
      {"step", c.step},
      {"layout", c.layout ? Json(std::string(OffloadPlacementName(*c.layout))) : Json(nullptr)},
      {"units", c.num_units},
      {"bytes", c.num_bytes},
      {"complete", c.info.problem.empty()},
      // Only a listing made with verification can say a checkpoint verified.
      {"verified", verified ? Json(c.info.verified) : Json(nullptr)},
      {"problem", c.info.problem.empty() ? Json(nullptr) : Json(c.info.problem)}};
  if (c.layout == OffloadPlacement::kNvme) {
    j["swap_set"] = {{"run_id", c.swap_set.run_id}, {"directories", c.swap_set.directories}};
  }
  return j;
}

Json SwapSetToJson(const SwapSetListing& s) {
  Json tensors = Json::array();
  for (const auto& t : s.tensors) tensors.push_back({{"name", t.name}, {"bytes", t.num_bytes}});
  return {{"path", s.info.path},
          {"directory", s.directory},
          {"run_id", s.info.run_id},
          {"state", std::string(offload::SwapSetStateName(s.info.state))},
          {"files", s.info.num_files},
          {"bytes_on_disk", s.info.num_bytes},
          {"data_bytes", s.data_bytes},
          {"checkpoint", s.checkpoint.empty() ? Json(nullptr) : Json(s.checkpoint)},
          {"checkpoint_uses_it", s.checkpoint_uses_it},
          {"problem", s.problem.empty() ? Json(nullptr) : Json(s.problem)},
          {"tensors", tensors}};
}

}  // namespace

Json TierListingToJson(const TierListing& listing, bool verified) {
  Json checkpoints = Json::array(), swap_sets = Json::array();
  for (const auto& c : listing.checkpoints) checkpoints.push_back(CheckpointToJson(c, verified));
  for (const auto& s : listing.swap_sets) swap_sets.push_back(SwapSetToJson(s));
  Json model = nullptr;
  if (!listing.final_model_dir.empty()) {
    model = {{"path", listing.final_model_dir}, {"bytes", listing.final_model_bytes}};
  }
  return {{"path_kind", PathKindName(listing.kind)},
          {"checkpoints", checkpoints},
          {"swap_sets", swap_sets},
          {"final_model", model}};
}

Json VerifyReportToJson(const VerifyReport& report) {
  Json items = Json::array();
  size_t corrupt = 0;
  for (const auto& item : report.items) {
    items.push_back({{"kind", item.kind},
                     {"path", item.path},
                     {"ok", item.ok},
                     {"detail", item.detail},
                     {"problems", item.problems}});
    corrupt += !item.ok;
  }
  return {{"ok", report.ok()},
          {"checked", report.items.size()},
          {"corrupt", corrupt},
          {"items", items}};
}

}  // namespace tierflow::tier

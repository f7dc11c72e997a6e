// `tierflow tier ls`.
#include "tier/tier_ls.h"

#include <filesystem>

#include "checkpoint/optimizer_state.h"
#include "checkpoint/swap_set_owner.h"
#include "io/json_util.h"
#include "offload/swap_reader.h"

namespace tierflow::tier {
namespace fs = std::filesystem;

uint64_t DirectoryBytes(const std::string& dir) {
  std::error_code ec;
  uint64_t total = 0;
  if (!fs::is_directory(dir, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

StatusOr<TierListing> ListTier(const std::string& path, bool verify) {
  TF_ASSIGN_OR_RETURN(TierScan scan, ScanTierPath(path));
  TierListing out;
  out.kind = scan.kind;
  for (const std::string& c : scan.checkpoints) {
    CheckpointListing l;
    if (verify) {
      l.info = VerifyCheckpoint(c);
    } else {
      l.info.path = c;
      auto doc = ReadCheckpointState(c);
      if (!doc.ok()) {
        l.info.problem = doc.status().message();
      } else {
        // The step, even when the rest does not open (typed: a wrong type is
        // left at -1 and reported by Open below).
        (void)GetJsonInt64(*doc, "step", c, &l.info.step, JsonField::kOptional);
      }
    }
    l.num_bytes = DirectoryBytes(c);
    auto state = CheckpointOptimizerState::Open(c);
    if (state.ok()) {
      l.layout = (*state)->layout();
      l.num_units = (*state)->units().size();
      l.step = (*state)->step();
      l.swap_set = (*state)->swap_set();
      for (size_t d = 0; d < l.swap_set.directories.size(); ++d) {
        std::error_code ec;
        l.num_bytes +=
            fs::file_size(offload::SwapFilePath(l.swap_set.directories[d], l.swap_set.run_id,
                                                static_cast<uint32_t>(d)),
                          ec);
      }
    } else if (l.info.problem.empty()) {
      l.info.problem = state.status().message();
    }
    if (l.step < 0) l.step = l.info.step;
    l.info.step = l.step;
    l.info.layout = l.layout;
    out.checkpoints.push_back(std::move(l));
  }
  for (const std::string& dir : scan.swap_dirs) {
    TF_ASSIGN_OR_RETURN(auto sets, offload::ListSwapSets(dir));
    for (const offload::SwapSetInfo& set : sets) {
      SwapSetListing l;
      l.directory = dir;
      l.info = set;
      if (auto marker = ReadMarker(dir, set.run_id)) {
        l.checkpoint = marker->checkpoint;
        l.checkpoint_uses_it = CheckpointUsesSwapSet(marker->checkpoint, set.run_id);
      }
      std::error_code ec;
      for (const auto& f : fs::directory_iterator(set.path, ec)) {
        if (f.path().extension() != ".swap") continue;
        auto view = offload::SwapFileView::Open(f.path().string());
        if (!view.ok()) {
          if (l.problem.empty()) l.problem = view.status().message();
          continue;
        }
        if (l.tensors.empty()) l.tensors = (*view)->header().tensors;
      }
      for (const auto& t : l.tensors) l.data_bytes += t.num_bytes;
      out.swap_sets.push_back(std::move(l));
    }
  }
  out.final_model_dir = scan.final_model_dir;
  if (!out.final_model_dir.empty()) out.final_model_bytes = DirectoryBytes(out.final_model_dir);
  return out;
}

}  // namespace tierflow::tier

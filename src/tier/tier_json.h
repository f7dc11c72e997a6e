// Machine-readable forms of `tierflow tier ls --json` and `tier verify
// --json`: one JSON object each, every field the text form shows (sizes in
// bytes, paths absolute as listed), for scripts that watch offloaded state.
#pragma once

#include <nlohmann/json.hpp>

#include "tier/tier_ls.h"
#include "tier/tier_verify.h"

namespace tierflow::tier {

// {"path_kind", "checkpoints": [{path, step, layout, units, bytes, complete,
//  verified, problem, swap_set?}], "swap_sets": [{path, run_id, state, files,
//  bytes_on_disk, data_bytes, checkpoint, checkpoint_uses_it, problem,
//  tensors: [{name, bytes}]}], "final_model": {path, bytes} | null}
nlohmann::json TierListingToJson(const TierListing& listing, bool verified);

// {"ok", "checked", "corrupt", "items": [{kind, path, ok, detail, problems}]}
nlohmann::json VerifyReportToJson(const VerifyReport& report);

}  // namespace tierflow::tier

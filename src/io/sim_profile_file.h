// `--device sim:PROFILE`: PROFILE is a built-in simulated GPU's name
// (tierflow/sim_profile.h) or the path of a JSON file with the same fields:
//   {"name": "my-gpu", "tensor_tflops": 989, "vector_tflops": 67,
//    "hbm_gb_per_s": 3350, "link_gb_per_s": 64, "memory_gib": 80,
//    "tensor_efficiency": 0.6, ...}   (efficiencies and launch_overhead_us optional)
#pragma once

#include <string_view>

#include "tierflow/sim_profile.h"
#include "tierflow/status.h"

namespace tierflow {

// A built-in name first; otherwise, when the text names a file (contains '/'
// or ends in ".json"), that file. Errors name the file and the field: a
// missing or mistyped field, an unknown key, a value ValidateSimProfile
// refuses; NotFound for an unknown name.
StatusOr<SimProfile> ResolveSimProfile(std::string_view name_or_path);

}  // namespace tierflow

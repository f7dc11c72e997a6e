// The built-in simulated GPUs, from the vendors' published specifications.
#include "tierflow/sim_profile.h"

#include <cmath>

namespace tierflow {

const std::vector<SimProfile>& BuiltinSimProfiles() {
  // Dense peaks (NVIDIA data sheets): bf16 tensor, fp32, memory bandwidth,
  // host link per direction (PCIe 5.0 x16 = 64 GB/s, 4.0 x16 = 32 GB/s), memory;
  // the efficiencies are SimProfile's stated defaults.
  // {name, tensor_tflops, vector_tflops, hbm_gb_per_s, link_gb_per_s, memory_gib}
  static const std::vector<SimProfile> kProfiles = {
      SimProfile{"h100-sxm", 989, 67, 3350, 64, 80},
      SimProfile{"h100-pcie", 756, 51, 2000, 64, 80},
      SimProfile{"a100-80gb", 312, 19.5, 2039, 32, 80},
      SimProfile{"l40s", 362, 91.6, 864, 32, 48},
      // GeForce: bf16 with fp32 accumulate runs at half the fp16-accumulate rate.
      SimProfile{"rtx-4090", 165, 82.6, 1008, 32, 24},
  };
  return kProfiles;
}

StatusOr<SimProfile> FindBuiltinSimProfile(std::string_view name) {
  std::string names;
  for (const SimProfile& p : BuiltinSimProfiles()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return NotFoundError("no built-in simulated GPU named '" + std::string(name) + "': use one of " +
                       names + ", or a JSON file with the same fields");
}

Status ValidateSimProfile(const SimProfile& p) {
  auto bad = [&](const char* field, const std::string& why) {
    return InvalidArgumentError("simulated GPU profile '" + p.name + "': " + field + " " + why);
  };
  const std::pair<const char*, double> peaks[] = {{"tensor_tflops", p.tensor_tflops},
                                                  {"vector_tflops", p.vector_tflops},
                                                  {"hbm_gb_per_s", p.hbm_gb_per_s},
                                                  {"link_gb_per_s", p.link_gb_per_s},
                                                  {"memory_gib", p.memory_gib}};
  for (const auto& [field, value] : peaks) {
    if (!std::isfinite(value) || value <= 0) {
      return bad(field, "must be a finite number > 0, got " + std::to_string(value));
    }
  }
  const std::pair<const char*, double> efficiencies[] = {{"tensor_efficiency", p.tensor_efficiency},
                                                         {"vector_efficiency", p.vector_efficiency},
                                                         {"hbm_efficiency", p.hbm_efficiency},
                                                         {"link_efficiency", p.link_efficiency}};
  for (const auto& [field, value] : efficiencies) {
    if (!(value > 0 && value <= 1)) {
      return bad(field, "must be in (0, 1], got " + std::to_string(value));
    }
  }
  if (!std::isfinite(p.launch_overhead_us) || p.launch_overhead_us < 0) {
    return bad("launch_overhead_us", "must be a finite number >= 0");
  }
  return Status::Ok();
}

}  // namespace tierflow

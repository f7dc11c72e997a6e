// The simulated accelerator's clock: how long a kernel or a copy would take
// on the profile's GPU (tierflow/sim_profile.h), as a roofline.
//
//   kernel: launch overhead + max(tensor FLOPs / (tensor peak x eff),
//                                 vector FLOPs / (vector peak x eff),
//                                 bytes / (HBM bandwidth x eff))
//   host <-> device copy: bytes / (link rate x eff)
//   device-memory copy or memset: bytes moved / (HBM bandwidth x eff)
#pragma once

#include <cstddef>

#include "tierflow/device.h"
#include "tierflow/sim_profile.h"

namespace tierflow {

double SimKernelSeconds(const SimProfile& profile, const KernelCost& cost);
double SimLinkSeconds(const SimProfile& profile, size_t num_bytes);
double SimDeviceMemorySeconds(const SimProfile& profile, double bytes_moved);

}  // namespace tierflow

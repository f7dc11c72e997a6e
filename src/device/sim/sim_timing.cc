// Roofline times of the simulated accelerator.
#include "device/sim/sim_timing.h"

#include <algorithm>

namespace tierflow {

double SimKernelSeconds(const SimProfile& p, const KernelCost& cost) {
  const double tensor = cost.tensor_flops / (p.tensor_tflops * 1e12 * p.tensor_efficiency);
  const double vector = cost.vector_flops / (p.vector_tflops * 1e12 * p.vector_efficiency);
  const double memory = cost.bytes / (p.hbm_gb_per_s * 1e9 * p.hbm_efficiency);
  return p.launch_overhead_us * 1e-6 + std::max({tensor, vector, memory});
}

double SimLinkSeconds(const SimProfile& p, size_t num_bytes) {
  return static_cast<double>(num_bytes) / (p.link_gb_per_s * 1e9 * p.link_efficiency);
}

double SimDeviceMemorySeconds(const SimProfile& p, double bytes_moved) {
  return bytes_moved / (p.hbm_gb_per_s * 1e9 * p.hbm_efficiency);
}

}  // namespace tierflow

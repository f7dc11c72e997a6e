// The simulated accelerator's GPU: the published peak figures of one GPU,
// and how much of each peak a well-tuned kernel reaches. `--device
// sim:PROFILE` times every kernel and copy with these figures (a roofline:
// FLOPs at peak x efficiency, bytes at bandwidth x efficiency) while the
// CPU device's memory accounting and stream semantics stay as they are.
//
// A timing model, never a result: it exists so the overlap of the GPU with
// the CPU optimizer and the transfers can be measured at a GPU's proportions
// on a machine without one. The peaks come from the vendors' data sheets
// (dense, no sparsity); the efficiencies are assumptions, stated here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

struct SimProfile {
  std::string name;
  double tensor_tflops = 0;  // dense bf16/fp16 tensor-core peak (fp32 accumulate), TFLOP/s
  double vector_tflops = 0;  // fp32 non-tensor peak, TFLOP/s
  double hbm_gb_per_s = 0;   // device-memory bandwidth, GB/s (1e9 bytes)
  double link_gb_per_s = 0;  // host <-> device, each direction, GB/s (PCIe: the spec rate)
  double memory_gib = 0;     // device memory, GiB
  // Fractions of each peak that real kernels reach, in (0, 1].
  double tensor_efficiency = 0.6;
  double vector_efficiency = 0.5;
  double hbm_efficiency = 0.8;
  double link_efficiency = 0.8;
  double launch_overhead_us = 4.0;  // per kernel, on top of its roofline time
};

// h100-sxm, h100-pcie, a100-80gb, l40s, rtx-4090.
const std::vector<SimProfile>& BuiltinSimProfiles();

// The built-in profile named `name`; NotFound lists the built-in names.
StatusOr<SimProfile> FindBuiltinSimProfile(std::string_view name);

// Every peak finite and > 0, every efficiency in (0, 1], overhead finite and
// >= 0; InvalidArgument names the profile and the field.
Status ValidateSimProfile(const SimProfile& profile);

}  // namespace tierflow

// `tierflow bench kernels`: the achieved throughput of the step's heaviest
// kernels on the selected device, each as a ratio to the device's peak.
//
// Cases (full shapes; `small` divides them for tests and quick looks):
//   gemm          bf16 4096 x 4096 x 4096, bf16 out
//   attention     causal, B = 1, H = 32 (8 KV heads, Llama-3's grouping),
//                 d = 128, T = 2048 and 4096: forward and backward
//   lm_head       one head chunk (HeadChunkRows: 1024 rows) at V = 128256,
//                 C = 4096: the logits GEMM and the fp32 weight-gradient GEMM
//                 (k = the chunk's rows)
//   elementwise   a bf16 residual add over 256 Mi elements: bytes read and
//                 written per second
//   the layers'   every other kernel of the Llama and GPT-2 blocks, the loss
//   kernels       and the gradient's cast, in GB/s (bench/layer_kernel_bench.h)
// FLOPs and bytes are op_costs' (kernels/op_costs.h), the counts the
// simulated accelerator times, so a figure and the sim's model of it use the
// same numerator.
//
// Peaks: on a sim device, its profile's spec (tensor TFLOP/s and HBM GB/s).
// Elsewhere, measured in the same run: the fastest of the three GEMM cases
// is the compute peak (its ratio is 1 by definition) and a device-to-device
// copy of the elementwise case's bytes, read plus written, is the bandwidth
// peak. (On the CPU device attention can beat its bf16 GEMMs, so its ratio
// may pass 1 there: a fact about the CPU backend, not a bound.)
//
// Each case runs once untimed, then `iterations` times, each followed by a
// stream synchronize; the best time is reported.
#pragma once

#include <string>
#include <vector>

#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow {

struct KernelBenchOptions {
  bool small = false;  // every dimension 1/8 or less (tests). Default: false
  int iterations = 3;  // timed runs per case (>= 1). Default: 3
};

struct KernelFigure {
  std::string name;   // "gemm", "attention_fwd_t2048", "lm_head_dw", "elementwise", ...
  std::string shape;  // e.g. "m=4096 n=4096 k=4096 bf16"
  double seconds = 0;
  double tflops = 0;    // achieved; 0 for the bandwidth-bound cases
  double gb_per_s = 0;  // achieved device-memory bytes per second (op_costs' bytes)
  // A bandwidth-bound case (elementwise and the layer kernels): its ratio is
  // to the bandwidth peak, every other case's to the compute peak.
  bool memory_bound = false;
  double ratio = 0;
};

struct KernelBenchResult {
  std::string device;
  std::string peak_source;  // "measured" or "sim profile <name> (spec)"
  double peak_tflops = 0;
  double peak_gb_per_s = 0;
  std::vector<KernelFigure> figures;
};

// Errors: InvalidArgument for iterations < 1; OutOfMemory naming the case's
// buffer when the device cannot hold it (the full shapes need about 4 GiB).
StatusOr<KernelBenchResult> RunKernelBench(Device& device, const KernelBenchOptions& options);

}  // namespace tierflow

// What `bench kernels`' cases share (bench/kernel_bench.cc, the GEMMs and
// attention; bench/layer_kernel_bench.cc, the bandwidth-bound kernels): the
// device buffers they fill, the best-of-N timing, and the figure from an
// op_costs count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/kernel_bench.h"
#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow::kernel_timing {

// Fills `elems` bf16 of device memory with small, finite values (a repeating
// pattern from one pinned buffer): timing on zeros flatters some GPUs. The
// sim runs no kernels, so there it writes nothing.
Status FillBf16(Device& device, Stream& stream, void* dst, size_t elems);

// Fills `elems` int32 of device memory with indices spread over [0, bound)
// (tokens, targets); nothing on the sim.
Status FillIndices(Device& device, Stream& stream, int32_t* dst, size_t elems, int32_t bound);

// Best seconds over `iterations` runs of `enqueue`, after one untimed run;
// each run ends with a stream synchronize.
StatusOr<double> BestSeconds(Stream& stream, int iterations,
                             const std::function<Status()>& enqueue);

// A case's figure from its best time and its op_costs count: matrix FLOPs
// where there are any (what a TFLOP/s figure counts), the vector ones
// otherwise; GB/s from the count's bytes.
KernelFigure Figure(std::string name, std::string shape, double seconds, const KernelCost& cost);

// "a=1 b=2".
std::string Dims(const std::vector<std::pair<const char*, int64_t>>& dims);

}  // namespace tierflow::kernel_timing

// Stream::Cast and Stream::SumSquares: each one Kernel (tierflow/device.h)
// with a host implementation for the CPU device, the CUDA kernels of
// cuda/grad_ops.cu, and the cost the sim device times. They are device
// operations, not kernels/ ops, so that the engine, which runs them on every
// gradient it sends over PCIe, needs nothing above the device.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <string>

#include "common/grad_stats.h"
#include "common/half.h"
#include "tierflow/device.h"
#ifdef TIERFLOW_HAVE_CUDA
#include "device/cuda/grad_ops.h"
#endif

namespace tierflow {
namespace {

// Elements per oneTBB task of the CPU device's cast (each converts alike, so
// the split changes no bit).
constexpr int64_t kCastChunk = 4096;

Status CheckArgs(const char* op, int64_t n, const void* in, const char* in_name, const void* out,
                 const char* out_name) {
  if (n <= 0) {
    return InvalidArgumentError(std::string(op) + ": n must be > 0, got " + std::to_string(n));
  }
  if (in == nullptr) return InvalidArgumentError(std::string(op) + ": " + in_name + " is null");
  if (out == nullptr) return InvalidArgumentError(std::string(op) + ": " + out_name + " is null");
  return Status::Ok();
}

Status CastOnHost(DType from, const void* src, DType to, void* dst, int64_t n) {
  const size_t from_size = DTypeSize(from), to_size = DTypeSize(to);
  const int64_t num_chunks = (n + kCastChunk - 1) / kCastChunk;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t k = r.begin(); k < r.end(); ++k) {
          const int64_t i0 = k * kCastChunk, i1 = std::min(n, i0 + kCastChunk);
          ConvertBuffer(from, static_cast<const char*>(src) + i0 * from_size, to,
                        static_cast<char*>(dst) + i0 * to_size, static_cast<size_t>(i1 - i0));
        }
      },
      tbb::simple_partitioner());
  return Status::Ok();
}

Status SumSquaresOnHost(DType dtype, const void* grads, int64_t n, GradSquares* out) {
  TF_ASSIGN_OR_RETURN(GradStatsResult r, GradStats(grads, dtype, static_cast<size_t>(n)));
  out->sum_squares = r.sum_squares;
  out->non_finite = r.has_non_finite ? 1 : 0;
  out->reserved = 0;
  return Status::Ok();
}

#ifdef TIERFLOW_HAVE_CUDA
cudaStream_t CudaStreamOf(Stream& stream) {
  return static_cast<cudaStream_t>(stream.native_handle());
}
#endif

}  // namespace

Status Stream::Cast(DType from, const void* src, DType to, void* dst, int64_t n) {
  TF_RETURN_IF_ERROR(CheckArgs("Cast", n, src, "src", dst, "dst"));
  const double elems = static_cast<double>(n);
  Kernel kernel;
  kernel.name = "Cast";
  // One read of the source, one write of the destination, a conversion each.
  kernel.cost.vector_flops = elems;
  kernel.cost.bytes = elems * static_cast<double>(DTypeSize(from) + DTypeSize(to));
  kernel.host = [=] { return CastOnHost(from, src, to, dst, n); };
#ifdef TIERFLOW_HAVE_CUDA
  kernel.cuda = [=](Stream& s) { return CastCuda(CudaStreamOf(s), from, src, to, dst, n); };
#endif
  return Launch(std::move(kernel));
}

Status Stream::SumSquares(DType dtype, const void* grads, int64_t n, GradSquares* out,
                          [[maybe_unused]] double* scratch) {
  TF_RETURN_IF_ERROR(CheckArgs("GradStats", n, grads, "grads", out, "out"));
  const double elems = static_cast<double>(n);
  Kernel kernel;
  kernel.name = "GradStats";
  // One read of the span, a multiply and an add per element.
  kernel.cost.vector_flops = 2 * elems;
  kernel.cost.bytes = elems * static_cast<double>(DTypeSize(dtype));
  kernel.host = [=] { return SumSquaresOnHost(dtype, grads, n, out); };
#ifdef TIERFLOW_HAVE_CUDA
  kernel.cuda = [=](Stream& s) {
    return GradSquaresCuda(CudaStreamOf(s), dtype, grads, n, out, scratch);
  };
#endif
  return Launch(std::move(kernel));
}

}  // namespace tierflow

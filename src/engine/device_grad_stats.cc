// LaunchGradStats: one op, three backends (tierflow/device.h's Kernel).
#include "engine/device_grad_stats.h"

#include "kernels/op_costs.h"
#include "optim/grad_stats.h"

namespace tierflow {

Status LaunchGradStats(Stream& stream, DType dtype, const void* grads, int64_t n, GradSquares* out,
                       [[maybe_unused]] double* scratch) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GradStats", "n", n));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull("GradStats", "grads", grads));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull("GradStats", "out", out));
  const double elems = static_cast<double>(n);
  return stream.Launch(
      {"GradStats", op_costs::Cost(0, 2 * elems, elems * static_cast<double>(DTypeSize(dtype))),
       [=]() -> Status {
         TF_ASSIGN_OR_RETURN(GradStatsResult r, GradStats(grads, dtype, static_cast<size_t>(n)));
         out->sum_squares = r.sum_squares;
         out->non_finite = r.has_non_finite ? 1 : 0;
         out->reserved = 0;
         return Status::Ok();
       },
       TF_CUDA_KERNEL(GradSquaresCuda(cuda_stream, dtype, grads, n, out, scratch))});
}

}  // namespace tierflow

// StreamProbe: the optimizer skeleton (optim/block_loop.h) with the update
// reduced to one add per stream.
#include "optim/stream_probe.h"

#include "optim/block_loop.h"

namespace tierflow {

using optim_internal::BlockBuffer;
using optim_internal::FloatArrayMap;

Status StreamProbe(const OptimSpans& spans, float addend) {
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, false, false, "StreamProbe"));
  optim_internal::ParallelForBlocks(spans.n, [&](size_t begin, size_t len) {
    const auto count = static_cast<Eigen::Index>(len);
    BlockBuffer a_buffer;
    optim_internal::LoadScaledGrads(spans.grads, spans.grad_dtype, begin, len, addend,
                                    a_buffer.data);
    FloatArrayMap a(a_buffer.data, count);
    for (float* state : {spans.params, spans.exp_avg, spans.exp_avg_sq}) {
      if (state != nullptr) FloatArrayMap(state + begin, count) += a;
    }
    if (spans.out != nullptr) {
      optim_internal::StoreNarrowed(spans.params + begin, spans.out, spans.out_dtype, begin, len);
    }
    return false;
  });
  return Status::Ok();
}

}  // namespace tierflow

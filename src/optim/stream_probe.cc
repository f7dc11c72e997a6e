// StreamProbe: the optimizer skeleton (optim/block_loop.h) with the update
// reduced to one add per stream.
#include "optim/stream_probe.h"

#include "optim/block_loop.h"

namespace tierflow {

using optim_internal::BlockBuffer;
using optim_internal::FloatBlock;

Status StreamProbe(const OptimSpans& spans, float addend) {
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, false, false, "StreamProbe"));
  optim_internal::ParallelForBlocks(spans, [&]<int N>(size_t begin, Eigen::Index len) {
    BlockBuffer a_buffer;
    optim_internal::LoadScaledGrads<N>(spans.grads, spans.grad_dtype, begin, len, addend,
                                       a_buffer.data);
    FloatBlock<N> a(a_buffer.data, len);
    for (float* state : {spans.params, spans.exp_avg, spans.exp_avg_sq}) {
      if (state != nullptr) FloatBlock<N>(state + begin, len) += a;
    }
    if (spans.out != nullptr) {
      optim_internal::StoreNarrowed<N>(spans.params + begin, spans.out, spans.out_dtype, begin,
                                       len);
    }
    return false;
  });
  return Status::Ok();
}

}  // namespace tierflow

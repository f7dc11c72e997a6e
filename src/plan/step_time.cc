// Step-time prediction. The engine runs each micro-batch's backward on the
// device while its gradients stream out (D2H) and accumulate on the host;
// the CPU optimizer then updates sub-groups with NVMe reads, writes and the
// H2D of new weights pipelined behind it, overlapping the next step's
// forward. So a step takes the slowest stage of each overlapped phase plus
// the update pipeline's fill.
#include "plan/step_time.h"

#include <algorithm>
#include <string>

namespace tierflow {
namespace {

double Seconds(double amount, double rate) { return rate > 0 ? amount / rate : 0.0; }

}  // namespace

double TrainingFlopsPerToken(const ModelConfig& m, int64_t seq_len, bool checkpointing) {
  double matmul_params = static_cast<double>(ParameterCount(m) - EmbeddingParameterCount(m));
  if (m.tie_embeddings) matmul_params += static_cast<double>(m.vocab_size) * m.d_model;
  const double attention = 12.0 * static_cast<double>(m.n_layers) * static_cast<double>(seq_len) *
                           static_cast<double>(m.n_heads * m.head_dim);
  const double flops = 6.0 * matmul_params + attention;
  return checkpointing ? flops * 4.0 / 3.0 : flops;
}

double AccumulateBytesPerParam(int64_t grad_accum, double transfer_bytes) {
  if (grad_accum <= 1) return 0;
  return static_cast<double>(grad_accum) * (transfer_bytes + 8.0);
}

void PredictStepTime(const PlanInput& in, const Hardware& hw, Plan& plan) {
  const Bandwidths& bw = hw.bandwidths;
  const double P = static_cast<double>(plan.params);
  const double a = static_cast<double>(DTypeSize(in.dtype));
  const double k = static_cast<double>(in.grad_accum);
  const double s = static_cast<double>(plan.state_bytes_per_param);
  const double nvme_params = static_cast<double>(plan.placement.nvme_state_params);

  plan.flops_per_step = TrainingFlopsPerToken(in.model, in.seq_len, in.checkpointing) *
                        static_cast<double>(plan.tokens_per_step);
  // Vocabulary slices: the head recomputes its logits for the weight gradient.
  if (plan.placement.vocab_sliced) {
    plan.flops_per_step += 2.0 * static_cast<double>(in.model.vocab_size) *
                           static_cast<double>(in.model.d_model) *
                           static_cast<double>(plan.tokens_per_step);
  }
  const double compute =
      Seconds(plan.flops_per_step, bw.device_tflops * 1e12 * bw.device_efficiency);
  // Gradients leave the device in the transfer dtype, every micro-batch.
  const double t = static_cast<double>(DTypeSize(plan.grad_transfer_dtype));
  const double d2h = Seconds(k * P * t, bw.d2h_gb_per_second * 1e9);
  const double accumulate =
      Seconds(P * AccumulateBytesPerParam(in.grad_accum, t), bw.host_memory_gb_per_second * 1e9);
  const double optimizer = Seconds(P, bw.adam_params_per_second);
  // Reads and writes share the drives, so their times add.
  const double nvme = Seconds(nvme_params * s, bw.nvme_read_gb_per_second * 1e9) +
                      Seconds(nvme_params * s, bw.nvme_write_gb_per_second * 1e9);
  const double h2d = Seconds(P * a, bw.h2d_gb_per_second * 1e9);

  plan.stages = {
      {"compute", compute, "forward + backward on the device"},
      {"d2h_gradients", d2h,
       std::string(DTypeName(plan.grad_transfer_dtype)) +
           " gradients to pinned host buffers, every micro-batch"},
      {"host_accumulate", accumulate,
       in.grad_accum > 1 ? "fp32 gradient accumulation on the host"
                         : "none: one micro-batch's gradients land as they are, their norm "
                           "is computed on the device"},
      {"optimizer", optimizer, "CPU optimizer over all parameters"},
      {"nvme_io", nvme, "optimizer state read + written for the NVMe share"},
      {"h2d_weights", h2d, "new weights to the device"},
  };
  // The update (optimizer, NVMe, H2D pipelined over sub-groups) of step n
  // overlaps the first forward of step n+1, which waits per unit; each
  // backward overlaps its own D2H and accumulation. Speculation during
  // backward (the overlapped pipeline) can only shorten this; not counted.
  const double forward_share = in.checkpointing ? 0.25 : 1.0 / 3.0;  // 2N of 8N or 6N
  const double per_micro = compute / k;
  const double transfer_per_micro = std::max(d2h, accumulate) / k;
  const double update_slowest = std::max({optimizer, nvme, h2d});
  const double update_sum = optimizer + nvme + h2d;
  const double groups = static_cast<double>(std::max<int64_t>(plan.placement.num_sub_groups, 1));
  const double update = update_slowest + (update_sum - update_slowest) / groups;
  plan.predicted_step_seconds = std::max(update, forward_share * per_micro) +
                                std::max((1 - forward_share) * per_micro, transfer_per_micro) +
                                (k - 1) * std::max(per_micro, transfer_per_micro);
  plan.serial_step_seconds = compute + d2h + accumulate + update_sum;
}

}  // namespace tierflow

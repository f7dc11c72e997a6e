// The gradient inbox's buffers and bucket accounting.
#include "engine/grad_inbox.h"

#include <string>

namespace tierflow {

StatusOr<std::unique_ptr<GradInbox>> GradInbox::Create(Device& device, uint64_t model_params,
                                                       const Config& config) {
  if (config.bucket_params == 0 || config.buckets < 1) {
    return InvalidArgumentError("GradInbox: " + std::to_string(config.buckets) + " buckets of " +
                                std::to_string(config.bucket_params) +
                                " parameters: need at least one of at least one");
  }
  std::unique_ptr<GradInbox> inbox(new GradInbox(config));
  const uint64_t n = config.bucket_params;
  const bool staged =
      config.landing != GradLanding::kLanded && config.landing != GradLanding::kNone;
  inbox->buckets_.resize(static_cast<size_t>(config.buckets));
  inbox->busy_.assign(inbox->buckets_.size(), 0);
  for (Bucket& b : inbox->buckets_) {
    TF_ASSIGN_OR_RETURN(b.grads, device.Allocate(n * 4, "gradient bucket"));
    if (config.transfer_dtype != DType::kF32) {
      TF_ASSIGN_OR_RETURN(b.wire, device.Allocate(n * inbox->tbytes(), "gradient transfer buffer"));
    }
    if (staged) {
      TF_ASSIGN_OR_RETURN(b.staging,
                          device.AllocatePinned(n * inbox->tbytes(), "gradient staging"));
    }
    TF_ASSIGN_OR_RETURN(b.filled, device.CreateEvent(false));
  }
  // Per-bucket gradient statistics, computed on the device in a step of one
  // micro-batch (Stream::SumSquares, tierflow/device.h) and landed beside the gradients.
  const size_t stats_bytes = inbox->buckets_.size() * sizeof(GradSquares);
  TF_ASSIGN_OR_RETURN(inbox->stats_device_, device.Allocate(stats_bytes, "gradient statistics"));
  TF_ASSIGN_OR_RETURN(inbox->stats_scratch_,
                      device.Allocate(kGradSquaresScratchBytes, "gradient statistics scratch"));
  TF_ASSIGN_OR_RETURN(inbox->stats_host_,
                      device.AllocatePinned(stats_bytes, "gradient statistics"));
  TF_RETURN_IF_ERROR(inbox->AllocateLanding(device, model_params));
  return inbox;
}

Status GradInbox::AllocateLanding(Device& device, uint64_t model_params) {
  const GradLanding landing = config_.landing;
  if (landing == GradLanding::kLanded) {
    TF_ASSIGN_OR_RETURN(landed_,
                        device.AllocatePinned(model_params * tbytes(), "gradient landing"));
  } else if (landing == GradLanding::kGathered) {
    // Each micro-batch's gradients are summed over the ranks as they come
    // (the global order): no local fp32 accumulator, a unit-gathering buffer.
    TF_ASSIGN_OR_RETURN(gathered_, HostPages::AllocateResident(model_params * tbytes(),
                                                               "gradients for the ranks' sum"));
  } else if (landing == GradLanding::kAccumulated) {
    TF_ASSIGN_OR_RETURN(accumulator_,
                        HostPages::AllocateResident(model_params * 4, "fp32 gradient accumulator"));
  } else if (landing == GradLanding::kEither) {
    TF_ASSIGN_OR_RETURN(landed_,
                        device.AllocatePinned(model_params * 4, "fp32 gradient accumulator"));
  }
  return Status::Ok();  // kStaged, kNone: nothing lands whole
}

int GradInbox::TakeFree() {
  for (size_t b = 0; b < busy_.size(); ++b) {
    if (!busy_[b]) {
      busy_[b] = 1;
      return static_cast<int>(b);
    }
  }
  return -1;
}

void GradInbox::Free(int b) { busy_[static_cast<size_t>(b)] = 0; }

int GradInbox::busy_buckets() const {
  int n = 0;
  for (char b : busy_) n += b != 0 ? 1 : 0;
  return n;
}

}  // namespace tierflow

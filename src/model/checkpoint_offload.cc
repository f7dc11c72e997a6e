// The host store of activation checkpoints and its two copy streams.
#include "model/checkpoint_offload.h"

#include <algorithm>
#include <string>
#include <utility>

namespace tierflow::model_internal {

int CheckpointOffload::DeviceSlots(int num_layers) { return std::min(kSlots, num_layers + 1); }

int CheckpointOffload::HostCheckpoints(int num_layers) {
  return std::max(0, num_layers + 1 - kSlots);
}

StatusOr<std::unique_ptr<CheckpointOffload>> CheckpointOffload::Create(Device& device,
                                                                       int num_layers,
                                                                       uint64_t bytes_each,
                                                                       std::vector<void*> slots) {
  if (num_layers < 1 || static_cast<int>(slots.size()) != DeviceSlots(num_layers)) {
    return InvalidArgumentError("checkpoint offload: " + std::to_string(slots.size()) +
                                " device slots for " + std::to_string(num_layers) +
                                " blocks (it needs " + std::to_string(DeviceSlots(num_layers)) +
                                ")");
  }
  std::unique_ptr<CheckpointOffload> o(new CheckpointOffload());
  o->host_checkpoints_ = HostCheckpoints(num_layers);
  o->bytes_each_ = bytes_each;
  o->slots_ = std::move(slots);
  o->host_bytes_ = static_cast<uint64_t>(o->host_checkpoints_) * bytes_each;
  if (o->host_bytes_ > 0) {
    TF_ASSIGN_OR_RETURN(
        o->host_, device.AllocatePinned(o->host_bytes_, "activation checkpoints (host store)"));
  }
  TF_ASSIGN_OR_RETURN(o->d2h_, device.CreateStream("activation checkpoints d2h"));
  TF_ASSIGN_OR_RETURN(o->h2d_, device.CreateStream("activation checkpoints h2d"));
  for (auto* events : {&o->written_, &o->saved_, &o->released_, &o->loaded_}) {
    for (size_t s = 0; s < o->slots_.size(); ++s) {
      TF_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, device.CreateEvent());
      events->push_back(std::move(e));
    }
  }
  return o;
}

Status CheckpointOffload::BeforeWrite(Stream& compute, int r) {
  if (!Saved(r - kSlots)) return Status::Ok();
  return compute.Wait(*saved_[static_cast<size_t>(r % kSlots)]);
}

Status CheckpointOffload::AfterWrite(Stream& compute, int r, uint64_t bytes) {
  if (!Saved(r)) return Status::Ok();
  const size_t slot = static_cast<size_t>(r % kSlots);
  TF_RETURN_IF_ERROR(compute.Record(*written_[slot]));
  TF_RETURN_IF_ERROR(d2h_->Wait(*written_[slot]));
  TF_RETURN_IF_ERROR(
      d2h_->CopyDeviceToHost(host_.as<char>() + static_cast<uint64_t>(r) * bytes_each_,
                             slots_[slot], static_cast<size_t>(bytes)));
  return d2h_->Record(*saved_[slot]);
}

// Residual r into its slot, once compute is done with what the slot held
// (the blocks enqueued so far) and its save has finished (it has: compute
// waited on it before it overwrote the slot in forward).
Status CheckpointOffload::Load(Stream& compute, int r, uint64_t bytes) {
  const size_t slot = static_cast<size_t>(r % kSlots);
  TF_RETURN_IF_ERROR(compute.Record(*released_[slot]));
  TF_RETURN_IF_ERROR(h2d_->Wait(*released_[slot]));
  TF_RETURN_IF_ERROR(h2d_->CopyHostToDevice(
      slots_[slot], host_.as<char>() + static_cast<uint64_t>(r) * bytes_each_,
      static_cast<size_t>(bytes)));
  return h2d_->Record(*loaded_[slot]);
}

Status CheckpointOffload::BeforeBackward(Stream& compute, int l, uint64_t bytes) {
  // Block l's input: its load was started before block l + 1 (a saved
  // residual is at most L - kSlots, so that block exists).
  if (Saved(l)) TF_RETURN_IF_ERROR(compute.Wait(*loaded_[static_cast<size_t>(l % kSlots)]));
  if (Saved(l - 1)) TF_RETURN_IF_ERROR(Load(compute, l - 1, bytes));
  return Status::Ok();
}

Status CheckpointOffload::Check() {
  TF_RETURN_IF_ERROR(d2h_->Synchronize());
  return h2d_->Synchronize();
}

}  // namespace tierflow::model_internal

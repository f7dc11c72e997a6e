// Ownership of device and pinned allocations, shared by every backend.
#include "tierflow/device.h"

namespace tierflow {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
    case DeviceKind::kSim:
      return "sim";
  }
  return "?";
}

template <BufferMemory kMemory>
BasicBuffer<kMemory>& BasicBuffer<kMemory>::operator=(BasicBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = other.device_;
    ptr_ = other.ptr_;
    num_bytes_ = other.num_bytes_;
    other.device_ = nullptr;
    other.ptr_ = nullptr;
    other.num_bytes_ = 0;
  }
  return *this;
}

template <BufferMemory kMemory>
void BasicBuffer<kMemory>::Reset() {
  if (device_ != nullptr && ptr_ != nullptr) {
    if constexpr (kMemory == BufferMemory::kPinnedHost) {
      device_->FreePinned(ptr_, num_bytes_);
    } else {
      device_->Free(ptr_, num_bytes_);
    }
  }
  device_ = nullptr;
  ptr_ = nullptr;
  num_bytes_ = 0;
}

template class BasicBuffer<BufferMemory::kDevice>;
template class BasicBuffer<BufferMemory::kPinnedHost>;

}  // namespace tierflow

// Ownership of device and pinned allocations, shared by every backend.
#include "tierflow/device.h"

namespace tierflow {

std::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
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

void DeviceBuffer::Reset() {
  if (device_ != nullptr && ptr_ != nullptr) device_->Free(ptr_, num_bytes_);
  device_ = nullptr;
  ptr_ = nullptr;
  num_bytes_ = 0;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
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

void PinnedBuffer::Reset() {
  if (device_ != nullptr && ptr_ != nullptr) device_->FreePinned(ptr_, num_bytes_);
  device_ = nullptr;
  ptr_ = nullptr;
  num_bytes_ = 0;
}

}  // namespace tierflow

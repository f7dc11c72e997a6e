// A Device whose kernels are the CUDA backend's, run by the CUDA emulator
// (device/cuda/emulator.h) in host memory: the CPU device's memory, copies
// and events, with every Launch running the op's cuda function instead of
// its host one. The ops' CUDA tests (ops_cuda_test.cc) run on it in CI, so
// the kernels' indexing, packs, tails, shuffles and mma fragments are
// checked against the references without a GPU.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "tierflow/device.h"

namespace tierflow::testing_ops {

class EmulatedCudaStream final : public Stream {
 public:
  explicit EmulatedCudaStream(std::unique_ptr<Stream> host) : host_(std::move(host)) {}
  const std::string& name() const override { return host_->name(); }
  DeviceKind device_kind() const override { return DeviceKind::kCuda; }
  Status CopyHostToDevice(void* dst, const void* src, size_t n) override {
    return host_->CopyHostToDevice(dst, src, n);
  }
  Status CopyDeviceToHost(void* dst, const void* src, size_t n) override {
    return host_->CopyDeviceToHost(dst, src, n);
  }
  Status CopyDeviceToDevice(void* dst, const void* src, size_t n) override {
    return host_->CopyDeviceToDevice(dst, src, n);
  }
  Status Memset(void* dst, int value, size_t n) override { return host_->Memset(dst, value, n); }
  Status Record(Event& event) override { return host_->Record(event); }
  Status Wait(const Event& event) override { return host_->Wait(event); }
  Status HostCallback(std::function<Status()> fn) override {
    return host_->HostCallback(std::move(fn));
  }
  // The emulator runs a launch to its end: earlier work first.
  Status Launch(Kernel kernel) override {
    TF_RETURN_IF_ERROR(host_->Synchronize());
    if (!kernel.cuda) {
      return UnimplementedError(std::string(kernel.name) + " has no CUDA implementation");
    }
    return kernel.cuda(*this);
  }
  Status Synchronize() override { return host_->Synchronize(); }
  void* native_handle() const override { return nullptr; }

 private:
  std::unique_ptr<Stream> host_;
};

class EmulatedCudaDevice final : public Device {
 public:
  explicit EmulatedCudaDevice(std::unique_ptr<Device> host) : host_(std::move(host)) {}
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string description() const override { return "CUDA emulated on the CPU"; }
  // Buffers belong to the CPU device, which frees them.
  StatusOr<DeviceBuffer> Allocate(size_t n, std::string_view what = "") override {
    return host_->Allocate(n, what);
  }
  StatusOr<PinnedBuffer> AllocatePinned(size_t n, std::string_view what = "") override {
    return host_->AllocatePinned(n, what);
  }
  MemoryStats DeviceMemory() const override { return host_->DeviceMemory(); }
  MemoryStats PinnedMemory() const override { return host_->PinnedMemory(); }
  void ResetPeaks() override { host_->ResetPeaks(); }
  StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) override {
    TF_ASSIGN_OR_RETURN(auto s, host_->CreateStream(std::move(name)));
    return std::unique_ptr<Stream>(std::make_unique<EmulatedCudaStream>(std::move(s)));
  }
  StatusOr<std::unique_ptr<Event>> CreateEvent(bool enable_timing = false) override {
    return host_->CreateEvent(enable_timing);
  }
  Status Synchronize() override { return host_->Synchronize(); }

 private:
  void Free(void*, size_t) override {}
  void FreePinned(void*, size_t) override {}
  std::unique_ptr<Device> host_;
};

// The emulated device over a fresh CPU device.
inline std::unique_ptr<Device> MakeEmulatedCudaDevice() {
  DeviceOptions o;
  o.kind = DeviceChoice::kCpu;
  auto d = CreateDevice(o);
  if (!d.ok()) return nullptr;
  return std::make_unique<EmulatedCudaDevice>(std::move(d).value());
}

}  // namespace tierflow::testing_ops

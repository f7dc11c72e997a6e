// The CUDA device: cudaMalloc'd memory with accounting, page-aligned cudaHostRegister'd
// pinned memory, non-blocking streams each with its own cuBLAS handle, and
// CUDA events. Only src/device/cuda and src/kernels/cuda see this header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "device/memory_accounting.h"
#include "tierflow/device.h"

namespace tierflow {

class CudaStream : public Stream {
 public:
  static StatusOr<std::unique_ptr<CudaStream>> Create(int ordinal, std::string name);
  ~CudaStream() override;

  const std::string& name() const override { return name_; }
  DeviceKind device_kind() const override { return DeviceKind::kCuda; }
  Status CopyHostToDevice(void* dst_device, const void* src_host, size_t num_bytes) override;
  Status CopyDeviceToHost(void* dst_host, const void* src_device, size_t num_bytes) override;
  Status CopyDeviceToDevice(void* dst_device, const void* src_device, size_t num_bytes) override;
  Status Memset(void* dst_device, int value, size_t num_bytes) override;
  Status Record(Event& event) override;
  Status Wait(const Event& event) override;
  Status HostCallback(std::function<Status()> fn) override;
  Status Launch(Kernel kernel) override;
  Status Synchronize() override;
  void* native_handle() const override { return stream_; }

  cudaStream_t cuda_stream() const { return stream_; }
  // The cuBLAS handle bound to this stream, created on first use.
  StatusOr<cublasHandle_t> Cublas();
  // Creates the cuBLAS handle and workspace now (Cublas() would at the first GEMM).
  Status PrepareForKernels() override { return Cublas().status(); }

  // Records the first error raised by a host callback (called on CUDA's callback thread).
  void SetCallbackError(const Status& s);

 private:
  CudaStream(int ordinal, std::string name, cudaStream_t stream)
      : ordinal_(ordinal), name_(std::move(name)), stream_(stream) {}
  Status StickyError();

  int ordinal_;
  std::string name_;
  cudaStream_t stream_;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  std::mutex mu_;
  Status callback_error_;
};

class CudaEvent : public Event {
 public:
  CudaEvent(cudaEvent_t event, bool timing) : event_(event), timing_(timing) {}
  ~CudaEvent() override;
  bool Query() const override;
  Status HostWait() override;
  StatusOr<double> ElapsedMsSince(const Event& start) const override;
  cudaEvent_t cuda_event() const { return event_; }

 private:
  cudaEvent_t event_;
  bool timing_;
};

class CudaDevice : public Device {
 public:
  static StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal, uint64_t capacity_bytes);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string description() const override { return description_; }
  StatusOr<DeviceBuffer> Allocate(size_t num_bytes, std::string_view what) override;
  StatusOr<PinnedBuffer> AllocatePinned(size_t num_bytes, std::string_view what) override;
  MemoryStats DeviceMemory() const override { return device_memory_.Stats(); }
  MemoryStats PinnedMemory() const override { return pinned_memory_.Stats(); }
  void ResetPeaks() override;
  StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) override;
  StatusOr<std::unique_ptr<Event>> CreateEvent(bool enable_timing) override;
  Status Synchronize() override;

 protected:
  void Free(void* ptr, size_t num_bytes) override;
  void FreePinned(void* ptr, size_t num_bytes) override;

 private:
  CudaDevice(int ordinal, uint64_t capacity_bytes, std::string description);
  int ordinal_;
  std::string description_;
  MemoryAccounting device_memory_;
  MemoryAccounting pinned_memory_;
};

}  // namespace tierflow

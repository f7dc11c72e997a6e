// The CUDA device.
#include "device/cuda/cuda_device.h"

#include "common/host_memory.h"
#include "common/units.h"
#include "device/cuda/cuda_check.h"

namespace tierflow {
namespace {

// cuBLAS workspace per stream: lets cuBLAS pick its fast kernels without
// allocating behind our accounting.
constexpr size_t kCublasWorkspaceBytes = 32ull << 20;

struct CallbackPayload {
  CudaStream* stream;
  std::function<Status()> fn;
};

void CUDART_CB RunHostCallback(void* data) {
  std::unique_ptr<CallbackPayload> payload(static_cast<CallbackPayload*>(data));
  Status s = payload->fn();
  if (!s.ok()) payload->stream->SetCallbackError(s);
}

}  // namespace

// ---- CudaStream ----

StatusOr<std::unique_ptr<CudaStream>> CudaStream::Create(int ordinal, std::string name) {
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaStream_t s = nullptr;
  TF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return std::unique_ptr<CudaStream>(new CudaStream(ordinal, std::move(name), s));
}

CudaStream::~CudaStream() {
  cudaSetDevice(ordinal_);
  cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  cudaStreamDestroy(stream_);
}

void CudaStream::SetCallbackError(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (callback_error_.ok()) callback_error_ = s.WithContext("stream '" + name_ + "' host callback");
}

Status CudaStream::StickyError() {
  std::lock_guard<std::mutex> lock(mu_);
  return callback_error_;
}

Status CudaStream::CopyHostToDevice(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(StickyError());
  TF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
  return Status::Ok();
}

Status CudaStream::CopyDeviceToHost(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(StickyError());
  TF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
  return Status::Ok();
}

Status CudaStream::CopyDeviceToDevice(void* dst, const void* src, size_t n) {
  TF_RETURN_IF_ERROR(StickyError());
  TF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_));
  return Status::Ok();
}

Status CudaStream::Memset(void* dst, int value, size_t n) {
  TF_RETURN_IF_ERROR(StickyError());
  TF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, n, stream_));
  return Status::Ok();
}

Status CudaStream::Record(Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (e == nullptr) return InvalidArgumentError("Record: the event belongs to another device");
  TF_CUDA_RETURN_IF_ERROR(cudaEventRecord(e->cuda_event(), stream_));
  return Status::Ok();
}

Status CudaStream::Wait(const Event& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(&event);
  if (e == nullptr) return InvalidArgumentError("Wait: the event belongs to another device");
  TF_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, e->cuda_event(), 0));
  return Status::Ok();
}

Status CudaStream::HostCallback(std::function<Status()> fn) {
  TF_RETURN_IF_ERROR(StickyError());
  auto* payload = new CallbackPayload{this, std::move(fn)};
  cudaError_t err = cudaLaunchHostFunc(stream_, RunHostCallback, payload);
  if (err != cudaSuccess) {
    delete payload;
    return CudaStatus(err, "cudaLaunchHostFunc", __FILE__, __LINE__);
  }
  return Status::Ok();
}

Status CudaStream::Launch(Kernel kernel) {
  if (!kernel.cuda) {
    return UnimplementedError(std::string(kernel.name) +
                              " has no implementation for the cuda device");
  }
  TF_RETURN_IF_ERROR(StickyError());
  return kernel.cuda(*this);
}

Status CudaStream::Synchronize() {
  TF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return StickyError();
}

StatusOr<cublasHandle_t> CudaStream::Cublas() {
  if (cublas_ == nullptr) {
    TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
    TF_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
    TF_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
    TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
    TF_CUBLAS_RETURN_IF_ERROR(
        cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
    // Keep fp32 GEMMs in fp32 (no TF32) so they stay comparable to the CPU reference.
    TF_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  }
  return cublas_;
}

// ---- CudaEvent ----

CudaEvent::~CudaEvent() { cudaEventDestroy(event_); }

bool CudaEvent::Query() const { return cudaEventQuery(event_) == cudaSuccess; }

Status CudaEvent::HostWait() {
  TF_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return Status::Ok();
}

StatusOr<double> CudaEvent::ElapsedMsSince(const Event& start) const {
  const auto* s = dynamic_cast<const CudaEvent*>(&start);
  if (s == nullptr) return InvalidArgumentError("ElapsedMsSince: events of different devices");
  if (!timing_ || !s->timing_) {
    return InvalidArgumentError("ElapsedMsSince: both events must be created with timing enabled");
  }
  float ms = 0;
  TF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, s->event_, event_));
  return static_cast<double>(ms);
}

// ---- CudaDevice ----

CudaDevice::CudaDevice(int ordinal, uint64_t capacity_bytes, std::string description)
    : ordinal_(ordinal),
      description_(std::move(description)),
      device_memory_("GPU memory", capacity_bytes,
                     "lower the micro-batch or sequence length, turn on activation "
                     "checkpointing, or run `tierflow plan` to see what fits"),
      pinned_memory_("pinned host memory", 0, "") {}

CudaDevice::~CudaDevice() = default;

StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal, uint64_t capacity_bytes) {
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  TF_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  size_t free_bytes = 0, total_bytes = 0;
  TF_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  uint64_t capacity = free_bytes;
  if (capacity_bytes != 0 && capacity_bytes < capacity) capacity = capacity_bytes;
  std::string desc = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                     std::to_string(prop.minor) + ", " + FormatBytes(total_bytes) + ", " +
                     FormatBytes(capacity) + " usable)";
  return std::unique_ptr<CudaDevice>(new CudaDevice(ordinal, capacity, std::move(desc)));
}

StatusOr<DeviceBuffer> CudaDevice::Allocate(size_t num_bytes, std::string_view what) {
  if (num_bytes == 0) return DeviceBuffer();
  TF_RETURN_IF_ERROR(device_memory_.Reserve(num_bytes, what));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, num_bytes);
  if (err != cudaSuccess) {
    device_memory_.Release(num_bytes);
    return CudaStatus(err, "cudaMalloc", __FILE__, __LINE__)
        .WithContext("allocating " + FormatBytes(num_bytes) + " for " + std::string(what));
  }
  return DeviceBuffer(this, p, num_bytes);
}

void CudaDevice::Free(void* ptr, size_t num_bytes) {
  cudaFree(ptr);
  device_memory_.Release(num_bytes);
}

StatusOr<PinnedBuffer> CudaDevice::AllocatePinned(size_t num_bytes, std::string_view what) {
  if (num_bytes == 0) return PinnedBuffer();
  TF_RETURN_IF_ERROR(pinned_memory_.Reserve(num_bytes, what));
  // Page-aligned host pages, then page-locked by cudaHostRegister:
  // cudaHostAlloc serves small requests out of larger pinned chunks aligned
  // to less than a page, and the NVMe tier reads and writes these buffers
  // with O_DIRECT, which needs 4096 bytes (seen on the first GPU run: the
  // optimizer state of a small unit was refused).
  const size_t bytes = PinnedHostBytes(num_bytes);
  void* p = AllocateHostPages(bytes);
  if (p == nullptr) {
    pinned_memory_.Release(num_bytes);
    return OutOfMemoryError("host memory: could not allocate " + FormatBytes(num_bytes) +
                            " of pinned memory" +
                            (what.empty() ? "" : " for " + std::string(what)));
  }
  cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    FreeHostPages(p, bytes);
    pinned_memory_.Release(num_bytes);
    return CudaStatus(err, "cudaHostRegister", __FILE__, __LINE__)
        .WithContext("pinning " + FormatBytes(num_bytes) + " for " + std::string(what));
  }
  return PinnedBuffer(this, p, num_bytes);
}

void CudaDevice::FreePinned(void* ptr, size_t num_bytes) {
  cudaHostUnregister(ptr);
  FreeHostPages(ptr, PinnedHostBytes(num_bytes));
  pinned_memory_.Release(num_bytes);
}

void CudaDevice::ResetPeaks() {
  device_memory_.ResetPeak();
  pinned_memory_.ResetPeak();
}

StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream(std::string name) {
  TF_ASSIGN_OR_RETURN(auto s, CudaStream::Create(ordinal_, std::move(name)));
  return std::unique_ptr<Stream>(std::move(s));
}

StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent(bool enable_timing) {
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  cudaEvent_t e = nullptr;
  TF_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&e, enable_timing ? cudaEventDefault : cudaEventDisableTiming));
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(e, enable_timing));
}

Status CudaDevice::Synchronize() {
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  TF_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return Status::Ok();
}

}  // namespace tierflow

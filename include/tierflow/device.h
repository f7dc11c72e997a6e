// The accelerator as the engine sees it: memory with accounting, pinned host
// memory, ordered streams, events and async copies.
//
// Three implementations stand behind this interface: "cuda" (a real GPU),
// "cpu" (an emulated accelerator whose device memory is a capacity-limited
// host allocation and whose streams are ordered queues run by their own
// threads) and "sim" (the cpu device with a GPU's timing: kernels are not
// run but take the time the profile's GPU would, copies copy and take the
// link's time; for measuring overlap, never for results). The same engine
// code and the same tests run on all three.
//
// Semantics follow CUDA's: work enqueued on one Stream runs in order; work on
// different streams may overlap; Event::Record marks a point in a stream and
// Stream::Wait makes later work on another stream wait for that point.
// Enqueue calls return at once; errors of the asynchronous work itself are
// sticky on the stream and come back from Synchronize() (or any later call).
//
// Thread safety: a Device may be used from any thread. A Stream may be fed
// from several threads, but the order of work is then the order of the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "tierflow/device_choice.h"
#include "tierflow/dtype.h"
#include "tierflow/sim_profile.h"
#include "tierflow/status.h"

namespace tierflow {

class Device;
class Stream;

// kSim: the CPU device with a GPU's timing (tierflow/sim_profile.h).
enum class DeviceKind { kCpu, kCuda, kSim };

std::string_view DeviceKindName(DeviceKind kind);

// Memory of one tier. Counts what callers asked for (not allocator slack).
struct MemoryStats {
  uint64_t in_use_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t capacity_bytes = 0;  // 0 = no limit enforced (pinned host memory)
  uint64_t num_allocations = 0;
};

// Which memory a buffer owns, and so which Device call frees it.
enum class BufferMemory {
  kDevice,      // Device::Allocate; counted in device memory stats
  kPinnedHost,  // Device::AllocatePinned: page-locked host memory (cudaHostRegister
                // on CUDA; aligned host memory on the CPU device)
};

// Owns one allocation of `kMemory`; frees it (and updates the accounting)
// when destroyed or Reset. Move-only. REQUIRES: the device outlives the
// buffer, and no stream work still uses the memory when it is destroyed
// (synchronize first). Use DeviceBuffer and PinnedBuffer; the two are one
// template so their ownership rules cannot drift apart.
template <BufferMemory kMemory>
class BasicBuffer {
 public:
  BasicBuffer() = default;
  BasicBuffer(Device* device, void* ptr, size_t num_bytes)
      : device_(device), ptr_(ptr), num_bytes_(num_bytes) {}
  BasicBuffer(BasicBuffer&& other) noexcept { *this = std::move(other); }
  BasicBuffer& operator=(BasicBuffer&& other) noexcept;
  BasicBuffer(const BasicBuffer&) = delete;
  BasicBuffer& operator=(const BasicBuffer&) = delete;
  ~BasicBuffer() { Reset(); }

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t num_bytes() const { return num_bytes_; }
  bool empty() const { return ptr_ == nullptr; }
  // Frees the memory now (if any); the buffer is then empty.
  void Reset();

 private:
  Device* device_ = nullptr;
  void* ptr_ = nullptr;
  size_t num_bytes_ = 0;
};

// Defined in src/device/buffers.cc, for these two kinds only.
extern template class BasicBuffer<BufferMemory::kDevice>;
extern template class BasicBuffer<BufferMemory::kPinnedHost>;

using DeviceBuffer = BasicBuffer<BufferMemory::kDevice>;
using PinnedBuffer = BasicBuffer<BufferMemory::kPinnedHost>;

// What a kernel costs, from its shapes alone: the input of timing models (the
// simulated accelerator) and of traces. Never measured, never a result.
struct KernelCost {
  double tensor_flops = 0;  // matrix-multiply FLOPs on 16-bit inputs (tensor cores on a GPU)
  double vector_flops = 0;  // every other FLOP (fp32 SIMT on a GPU)
  double bytes = 0;         // device-memory bytes read plus bytes written
};

// One op as every backend sees it. The op supplies an implementation per
// backend; the stream runs the one for its device (the CPU device the host
// function, as a host callback on the stream; CUDA the enqueue function, which
// launches the kernels on that stream and returns at once). A backend whose
// implementation is missing answers Unimplemented naming the op and device.
// This is the one place ops are dispatched: no op tests the device kind.
struct Kernel {
  const char* name = "";  // a string literal: the op's name, for errors and traces
  KernelCost cost;
  std::function<Status()> host;
  std::function<Status(Stream&)> cuda;
};

// The statistics of a gradient span as Stream::SumSquares leaves them in
// device memory, and as they cross to the host beside the gradients.
struct GradSquares {
  double sum_squares = 0;   // NaN when non_finite
  uint32_t non_finite = 0;  // 1 when some element is Inf or NaN
  uint32_t reserved = 0;
};
static_assert(sizeof(GradSquares) == 16);

// Device scratch that Stream::SumSquares needs, reusable by every call on one
// stream (CUDA: one double per block of the first pass).
inline constexpr int kGradSquaresBlocks = 256;
inline constexpr int64_t kGradSquaresScratchBytes = kGradSquaresBlocks * sizeof(double);

// A point in a stream's work. Reusable: each Record moves the point.
class Event {
 public:
  virtual ~Event() = default;
  // True when all work before the most recent Record has finished (true if never recorded).
  virtual bool Query() const = 0;
  // Blocks the calling host thread until the most recent Record has been reached.
  virtual Status HostWait() = 0;
  // Milliseconds between two recorded events that have both completed.
  // REQUIRES: the event was created with timing enabled.
  virtual StatusOr<double> ElapsedMsSince(const Event& start) const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
  virtual DeviceKind device_kind() const = 0;

  virtual Status CopyHostToDevice(void* dst_device, const void* src_host, size_t num_bytes) = 0;
  virtual Status CopyDeviceToHost(void* dst_host, const void* src_device, size_t num_bytes) = 0;
  virtual Status CopyDeviceToDevice(void* dst_device, const void* src_device, size_t num_bytes) = 0;
  virtual Status Memset(void* dst_device, int value, size_t num_bytes) = 0;

  virtual Status Record(Event& event) = 0;
  // Later work on this stream waits until `event`'s most recent Record (as of this call).
  virtual Status Wait(const Event& event) = 0;

  // Runs `fn` on a host thread once all earlier work of this stream is done;
  // later work waits for it. A non-OK result becomes the stream's sticky error.
  // `fn` must not enqueue work on this stream and wait for it (deadlock).
  virtual Status HostCallback(std::function<Status()> fn) = 0;

  // Enqueues `kernel` (see Kernel): errors of the launch itself return here,
  // errors of the running kernel become the stream's sticky error. On the
  // sim device the kernel is not run: the stream waits, burning no CPU, for
  // the time its cost takes on the profile's GPU.
  virtual Status Launch(Kernel kernel) = 0;

  // The two operations that prepare gradients for PCIe, which every device
  // provides (src/device/grad_ops.cc). Each is one Kernel through Launch: the
  // CPU device runs host code, CUDA its kernels (src/device/cuda/grad_ops.cu),
  // the sim device takes the time of a pass over the span. Bad arguments are
  // an InvalidArgument naming the op, returned before anything is enqueued.
  //
  // Cast: n elements at `src` (dtype `from`) to `to` at `dst`, each as
  // FromFloat<To>(ToFloat(x)) (round to nearest even, src/common/half.h), so
  // every device gives ConvertBuffer's bits (a NaN stays a NaN, though CUDA
  // may give it another payload); the same dtype is a copy.
  // REQUIRES: n > 0; src and dst in device memory, not overlapping.
  Status Cast(DType from, const void* src, DType to, void* dst, int64_t n);
  // SumSquares: the sum of squares of n elements of `dtype` (kF32, kBF16,
  // kF16) at `grads` and whether any is Inf or NaN, written to `out`. The
  // CPU device computes GradStats (common/grad_stats.h), the host's bits;
  // CUDA squares in double per thread and adds blocks and partial sums in a
  // fixed tree, the same bits run to run (within GradStats' rounding of it).
  // `scratch`: kGradSquaresScratchBytes of device memory no other stream
  // uses (CUDA; the CPU device needs none and takes null).
  // REQUIRES: n > 0; grads and out in device memory.
  Status SumSquares(DType dtype, const void* grads, int64_t n, GradSquares* out, double* scratch);

  // Blocks until all enqueued work has finished; returns the first error any of it raised.
  virtual Status Synchronize() = 0;

  // Creates now what this stream's kernels would otherwise create at their
  // first launch (on CUDA: the cuBLAS handle and its workspace), so that it
  // is allocated, and fails, at start-up and before the memory is measured,
  // not in the middle of the first step. A no-op where there is nothing to
  // create; calling it twice is harmless.
  virtual Status PrepareForKernels() { return Status::Ok(); }

  // The backend's own handle: cudaStream_t on CUDA, nullptr on the CPU device.
  virtual void* native_handle() const = 0;
};

struct DeviceOptions {
  // kAuto (CUDA when a GPU is usable, else cpu), kCpu, kCuda or kSim. Default: kAuto.
  DeviceChoice kind = DeviceChoice::kAuto;
  // kSim: the simulated GPU (validated by CreateDevice).
  SimProfile sim = {};
  // CPU device: capacity of the emulated device memory. Default: 2 GiB.
  // Sim: default the profile's memory.
  // CUDA: a limit below the GPU's free memory (0 = the GPU's free memory).
  uint64_t memory_capacity_bytes = 0;
  // CUDA device ordinal. Default: 0.
  int cuda_ordinal = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // The simulated GPU's figures (DeviceKind::kSim); nullptr for other kinds.
  virtual const SimProfile* sim_profile() const { return nullptr; }
  // "cpu (emulated, 2.00 GiB)" or "NVIDIA H200 (sm_90, 139.8 GiB)".
  virtual std::string description() const = 0;

  // Device memory, at least 256-byte aligned. Out of capacity is an
  // OutOfMemory error naming the bytes asked for, in use and the capacity.
  virtual StatusOr<DeviceBuffer> Allocate(size_t num_bytes, std::string_view what = "") = 0;
  // Page-locked host memory, at least 4096-byte aligned (usable for O_DIRECT).
  virtual StatusOr<PinnedBuffer> AllocatePinned(size_t num_bytes, std::string_view what = "") = 0;

  virtual MemoryStats DeviceMemory() const = 0;
  virtual MemoryStats PinnedMemory() const = 0;
  // Resets the peaks to the current use (between benchmark phases, per step).
  virtual void ResetPeaks() = 0;

  virtual StatusOr<std::unique_ptr<Stream>> CreateStream(std::string name) = 0;
  virtual StatusOr<std::unique_ptr<Event>> CreateEvent(bool enable_timing = false) = 0;

  // Blocks until all streams of this device are idle.
  virtual Status Synchronize() = 0;

 protected:
  template <BufferMemory>
  friend class BasicBuffer;
  virtual void Free(void* ptr, size_t num_bytes) = 0;
  virtual void FreePinned(void* ptr, size_t num_bytes) = 0;
};

// Creates the device named by options.kind. "auto" picks CUDA when the build
// has it and a GPU answers, else the CPU device; "cuda" without a usable GPU
// is an Unavailable error that says why (no driver, no device, not built).
StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options);

// Why CUDA is not usable here ("" when it is): "built without CUDA",
// "no CUDA driver (cudaErrorInsufficientDriver)", "no CUDA device".
std::string CudaUnavailableReason();

// Whether this build includes the CUDA backend.
bool BuiltWithCuda();

}  // namespace tierflow

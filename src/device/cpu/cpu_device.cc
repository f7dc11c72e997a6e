// The emulated CPU accelerator.
#include "device/cpu/cpu_device.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/host_memory.h"
#include "common/units.h"
#include "device/cpu/cpu_event.h"
#include "device/cpu/cpu_stream.h"

namespace tierflow {
namespace {

constexpr size_t kDeviceAlignment = 256;

size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// A stream that unregisters itself from its device when destroyed.
class RegisteredCpuStream : public CpuStream {
 public:
  RegisteredCpuStream(CpuDevice* device, std::string name)
      : CpuStream(device, std::move(name)), device_(device) {}
  ~RegisteredCpuStream() override { device_->Unregister(this); }

 private:
  CpuDevice* device_;
};

}  // namespace

CpuDevice::CpuDevice(uint64_t capacity_bytes, std::optional<SimProfile> sim)
    : sim_(std::move(sim)),
      device_memory_(sim_ ? "device memory (sim:" + sim_->name + ")"
                          : std::string("device memory (cpu, emulated)"),
                     capacity_bytes,
                     "raise --device-memory, or lower the micro-batch or sequence length"),
      pinned_memory_("pinned host memory", 0, "") {}

CpuDevice::~CpuDevice() = default;

std::string CpuDevice::description() const {
  if (sim_) {
    return "sim:" + sim_->name + " (a timing model: kernels are not run, losses are zero; " +
           FormatBytes(device_memory_.Stats().capacity_bytes) + " device memory)";
  }
  return "cpu (emulated accelerator, " + FormatBytes(device_memory_.Stats().capacity_bytes) +
         " device memory)";
}

StatusOr<DeviceBuffer> CpuDevice::Allocate(size_t num_bytes, std::string_view what) {
  if (num_bytes == 0) return DeviceBuffer();
  TF_RETURN_IF_ERROR(device_memory_.Reserve(num_bytes, what));
  void* p = nullptr;
  if (sim_) {
    // Page-aligned (beyond the 256 bytes promised), zero-filled, and backed
    // by host memory only where touched; huge pages, as common/host_memory.h
    // says why, so that a first touch costs no more than on real memory.
    p = mmap(nullptr, num_bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      device_memory_.Release(num_bytes);
      return OutOfMemoryError(
          "host could not reserve " + FormatBytes(num_bytes) +
          " of address space for simulated device memory: " + std::strerror(err));
    }
    (void)madvise(p, num_bytes, MADV_HUGEPAGE);  // a hint, as in host_memory.cc
  } else {
    p = AllocateHostPages(RoundUp(num_bytes, kDeviceAlignment));
  }
  if (p == nullptr) {
    device_memory_.Release(num_bytes);
    return OutOfMemoryError("host could not back " + FormatBytes(num_bytes) +
                            " of emulated device memory");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_[reinterpret_cast<uintptr_t>(p)] = num_bytes;
  }
  return DeviceBuffer(this, p, num_bytes);
}

void CpuDevice::Free(void* ptr, size_t num_bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  if (sim_) {
    sim_written_.Forget(ptr, num_bytes);
    munmap(ptr, num_bytes);
  } else {
    FreeHostPages(ptr, RoundUp(num_bytes, kDeviceAlignment));
  }
  device_memory_.Release(num_bytes);
}

StatusOr<PinnedBuffer> CpuDevice::AllocatePinned(size_t num_bytes, std::string_view what) {
  if (num_bytes == 0) return PinnedBuffer();
  TF_RETURN_IF_ERROR(pinned_memory_.Reserve(num_bytes, what));
  void* p = AllocateHostPages(PinnedHostBytes(num_bytes));
  if (p == nullptr) {
    pinned_memory_.Release(num_bytes);
    return OutOfMemoryError("host memory: could not allocate " + FormatBytes(num_bytes) +
                            " of pinned memory" +
                            (what.empty() ? "" : " for " + std::string(what)));
  }
  // Page-locked memory is resident from the start: so is its emulation, so
  // that no transfer or kernel pays a first-touch fault on it mid-step.
  Status resident =
      PopulateHostPages(p, PinnedHostBytes(num_bytes), what.empty() ? "pinned memory" : what);
  if (!resident.ok()) {
    FreeHostPages(p, PinnedHostBytes(num_bytes));
    pinned_memory_.Release(num_bytes);
    return resident;
  }
  return PinnedBuffer(this, p, num_bytes);
}

void CpuDevice::FreePinned(void* ptr, size_t num_bytes) {
  FreeHostPages(ptr, PinnedHostBytes(num_bytes));
  pinned_memory_.Release(num_bytes);
}

void CpuDevice::ResetPeaks() {
  device_memory_.ResetPeak();
  pinned_memory_.ResetPeak();
}

StatusOr<std::unique_ptr<Stream>> CpuDevice::CreateStream(std::string name) {
  auto stream = std::make_unique<RegisteredCpuStream>(this, std::move(name));
  std::lock_guard<std::mutex> lock(mu_);
  streams_.insert(stream.get());
  return std::unique_ptr<Stream>(std::move(stream));
}

void CpuDevice::Unregister(CpuStream* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(stream);
}

StatusOr<std::unique_ptr<Event>> CpuDevice::CreateEvent(bool enable_timing) {
  return std::unique_ptr<Event>(std::make_unique<CpuEvent>(enable_timing));
}

Status CpuDevice::Synchronize() {
  std::set<CpuStream*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  Status first;
  for (CpuStream* s : streams) {
    Status st = s->Synchronize();
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

Status CpuDevice::CheckDeviceRange(const void* ptr, size_t num_bytes, std::string_view what) const {
  if (num_bytes == 0) return Status::Ok();
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.upper_bound(addr);
  if (it != live_.begin()) {
    --it;
    if (addr >= it->first && addr + num_bytes <= it->first + it->second) return Status::Ok();
  }
  return InvalidArgumentError(
      std::string(what) + ": " + std::to_string(num_bytes) + " bytes at " + std::to_string(addr) +
      " are not inside one live device allocation (an illegal address on a GPU)");
}

}  // namespace tierflow

// bench/kernel_timing.h.
#include "bench/kernel_timing.h"

#include <algorithm>
#include <chrono>

#include "common/half.h"

namespace tierflow::kernel_timing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kFillChunk = size_t{4} << 20;  // elements per upload

// Uploads `elems` elements of `size` bytes at `dst` in kFillChunk pieces,
// each from the pattern `fill` writes into a pinned buffer.
Status Upload(Device& device, Stream& stream, void* dst, size_t elems, size_t size,
              const std::function<void(void* pattern, size_t n)>& fill, const char* what) {
  if (device.sim_profile() != nullptr) return Status::Ok();
  const size_t n0 = std::min(elems, kFillChunk);
  TF_ASSIGN_OR_RETURN(PinnedBuffer pattern, device.AllocatePinned(n0 * size, what));
  fill(pattern.data(), n0);
  for (size_t at = 0; at < elems; at += kFillChunk) {
    const size_t n = std::min(kFillChunk, elems - at);
    TF_RETURN_IF_ERROR(
        stream.CopyHostToDevice(static_cast<char*>(dst) + at * size, pattern.data(), n * size));
  }
  return stream.Synchronize();
}

}  // namespace

Status FillBf16(Device& device, Stream& stream, void* dst, size_t elems) {
  return Upload(
      device, stream, dst, elems, 2,
      [](void* pattern, size_t n) {
        auto* p = static_cast<bf16*>(pattern);
        for (size_t i = 0; i < n; ++i) {
          p[i] = FloatToBf16(0.01f * static_cast<float>(static_cast<int>(i * 7919 % 201) - 100) /
                             100.0f);
        }
      },
      "bench kernels fill");
}

Status FillIndices(Device& device, Stream& stream, int32_t* dst, size_t elems, int32_t bound) {
  return Upload(
      device, stream, dst, elems, 4,
      [bound](void* pattern, size_t n) {
        auto* p = static_cast<int32_t*>(pattern);
        for (size_t i = 0; i < n; ++i) {
          p[i] = static_cast<int32_t>((i * 2654435761u) % static_cast<uint32_t>(bound));
        }
      },
      "bench kernels indices");
}

StatusOr<double> BestSeconds(Stream& stream, int iterations,
                             const std::function<Status()>& enqueue) {
  TF_RETURN_IF_ERROR(enqueue());
  TF_RETURN_IF_ERROR(stream.Synchronize());
  double best = 0;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    TF_RETURN_IF_ERROR(enqueue());
    TF_RETURN_IF_ERROR(stream.Synchronize());
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i == 0 || s < best) best = s;
  }
  return best;
}

KernelFigure Figure(std::string name, std::string shape, double seconds, const KernelCost& cost) {
  KernelFigure f;
  f.name = std::move(name);
  f.shape = std::move(shape);
  f.seconds = seconds;
  f.tflops = (cost.tensor_flops > 0 ? cost.tensor_flops : cost.vector_flops) / seconds / 1e12;
  f.gb_per_s = cost.bytes / seconds / 1e9;
  return f;
}

std::string Dims(const std::vector<std::pair<const char*, int64_t>>& dims) {
  std::string out;
  for (const auto& [name, value] : dims) {
    out += (out.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(value);
  }
  return out;
}

}  // namespace tierflow::kernel_timing

// Shared plumbing of the training ops (embedding, norms, RoPE, attention,
// activations, pointwise, cross-entropy): the storage types, fixed-size row
// chunking for oneTBB, shape checks and the CUDA half of each op's Kernel.
//
// Conventions every op follows (llm.c style):
//   * Activations and weights are stored as T in {float, bf16, fp16}; every op
//     computes in fp32 and saves its statistics (mean, rstd, logsumexp) in fp32.
//   * Activation gradients are T. Unless an op says otherwise they are
//     OVERWRITTEN ("="). Parameter gradients are fp32 and ACCUMULATED ("+="),
//     so micro-batches add up in one fp32 buffer; zero it before the first one.
//   * B = batch, T = sequence length, C = model width, NH query heads, NKV
//     key/value heads, HS head size, V vocabulary. Shapes are row-major.
//   * Each op has three host entry points: XxxReference (plain loops, the
//     truth), XxxCpu (Eigen + oneTBB over fixed chunks, so bits do not depend
//     on the thread count), and the device-neutral Xxx(Stream&, ...) that
//     launches a Kernel (tierflow/device.h) carrying its cost (op_costs.h),
//     XxxCpu for the CPU device and the CUDA kernel for CUDA; the stream
//     runs its device's one. No op tests the device kind.
//     With CUDA built, XxxCuda(cudaStream_t, ...) is the CUDA entry point.
//   * Inputs are validated up front: a bad shape is an InvalidArgument Status
//     naming the op and the argument, returned before anything is enqueued.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "tierflow/device.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

#ifdef TIERFLOW_HAVE_CUDA
// The runtime's own declaration, so headers need not include cuda_runtime.h.
typedef struct CUstream_st* cudaStream_t;
#endif

namespace tierflow {

// Maps a storage type to its DType tag (for messages and casts).
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType DTypeOf<fp16>() {
  return DType::kF16;
}

namespace ops_internal {

// Rows per oneTBB task in the fast CPU paths. Fixed (never derived from the
// thread count) so any reduction over chunks adds in the same order.
constexpr int64_t kRowChunk = 16;

inline Status CheckPositive(const char* op, const char* name, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " must be > 0, got " +
                              std::to_string(value));
}

inline Status CheckNotNull(const char* op, const char* name, const void* ptr) {
  if (ptr != nullptr) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " is null");
}

// CheckPositive of each (name, value), in order.
inline Status CheckAllPositive(const char* op,
                               std::initializer_list<std::pair<const char*, int64_t>> args) {
  for (const auto& [name, value] : args) TF_RETURN_IF_ERROR(CheckPositive(op, name, value));
  return Status::Ok();
}

// CheckNotNull of each (name, pointer), in order.
inline Status CheckAllNotNull(const char* op,
                              std::initializer_list<std::pair<const char*, const void*>> args) {
  for (const auto& [name, ptr] : args) TF_RETURN_IF_ERROR(CheckNotNull(op, name, ptr));
  return Status::Ok();
}

// Launches an element-wise op's kernel over n elements once n > 0 (the error
// names the op, kernel.name).
inline Status LaunchElementwise(Stream& stream, int64_t n, Kernel kernel) {
  TF_RETURN_IF_ERROR(CheckPositive(kernel.name, "n", n));
  return stream.Launch(std::move(kernel));
}

}  // namespace ops_internal
}  // namespace tierflow

// The CUDA implementation of an op, as Kernel::cuda (tierflow/device.h):
// `TF_CUDA_KERNEL(FooCuda(cuda_stream, args...))` runs the call with
// `cuda_stream` (the cudaStream_t) and `cuda_stream_object` (the Stream&) in
// scope. Without the CUDA backend it is empty, so a CUDA stream (which cannot
// exist then) would be told the op has no cuda implementation.
#ifdef TIERFLOW_HAVE_CUDA
#define TF_CUDA_KERNEL(...)                                            \
  [=](::tierflow::Stream& cuda_stream_object) -> ::tierflow::Status {  \
    [[maybe_unused]] cudaStream_t cuda_stream =                        \
        static_cast<cudaStream_t>(cuda_stream_object.native_handle()); \
    return __VA_ARGS__;                                                \
  }
#else
#define TF_CUDA_KERNEL(...) nullptr
#endif

// The Kernel of op `Name` (its bare name, as in NameCpu and NameCuda) with
// `cost`: NameCpu(args...) on the host, NameCuda(cuda_stream, args...) on
// CUDA (TF_CUDA_KERNEL), both with the same args. A macro: it spells the
// name as a string and as the two entry points.
#define TF_OP_KERNEL(Name, cost, ...)                                        \
  (::tierflow::Kernel{#Name, (cost), [=] { return Name##Cpu(__VA_ARGS__); }, \
                      TF_CUDA_KERNEL(Name##Cuda(cuda_stream, __VA_ARGS__))})

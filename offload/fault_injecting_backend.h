// FaultInjectingBackend: wraps a real IoBackend and, by plan, fails chosen
// operations with an errno, cuts transfers short or flips a bit, so tests
// drive every error path of the engine and the store through real I/O.
//
// Operations are numbered 1, 2, 3, ... per kind filter (all ops, reads only,
// writes only) across every backend sharing one FaultPlan, in the order they
// are submitted.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "offload/io_backend.h"

namespace tierflow::offload {

enum class FaultKind : uint8_t {
  kErrno,          // complete with -error, nothing is transferred
  kShortTransfer,  // transfer about half (a multiple of 4096 bytes), report that
  kFlipBit,        // transfer all, but one bit of the data differs (read: in
                   // the caller's buffer; write: on disk)
  // io_uring_submit fails hard (with `error`) after this operation and the
  // rest of its batch were queued: they stay in the ring, as real SQEs do,
  // and the backend's next Submit issues them ahead of its own operations.
  // Only destroying the backend discards them.
  kSubmitFailsAfterQueuing,
};

struct FaultRule {
  FaultKind kind = FaultKind::kErrno;
  // Which operations count toward `nth`: nullopt = all. Default: all.
  std::optional<IoOpKind> op_kind;
  // The first operation hit (1-based) among those counted. Default: 1.
  uint64_t nth = 1;
  // How many consecutive counted operations are hit. Default: 1.
  uint64_t count = 1;
  // The errno for kErrno (EIO, ENOSPC, EROFS, EAGAIN, ...). Default: EIO.
  int error = EIO;
};

// The shared schedule of faults. Thread-safe.
class FaultPlan {
 public:
  void Add(FaultRule rule);
  void Clear();
  // Counts an operation of `kind` and returns the rule that hits it, if any.
  std::optional<FaultRule> Next(IoOpKind kind);
  uint64_t num_injected() const;
  // Makes RegisterBuffers fail as the kernel does under RLIMIT_MEMLOCK
  // (ENOMEM) or with another errno; 0 restores pass-through. Default: 0.
  void SetRegisterBuffersError(int error);
  int register_buffers_error() const;

 private:
  mutable std::mutex mu_;
  std::vector<FaultRule> rules_;
  uint64_t num_ops_ = 0, num_reads_ = 0, num_writes_ = 0;
  uint64_t num_injected_ = 0;
  int register_buffers_error_ = 0;
};

// A factory whose backends are `inner`'s, wrapped to follow `plan`.
IoBackendFactory FaultInjectingBackendFactory(std::shared_ptr<FaultPlan> plan,
                                              IoBackendFactory inner);

}  // namespace tierflow::offload

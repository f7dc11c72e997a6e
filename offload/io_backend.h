// IoBackend: the narrow storage interface the I/O engine drives, so tests can
// swap in a fault-injecting backend (LevelDB's Env / ErrorEnv pattern).
//
// One backend is one submission queue (one io_uring ring). It is driven by
// exactly one thread at a time (the engine gives each ring its own thread);
// it is not thread-safe. Completions carry back the submitter's user_data and
// the kernel's result: bytes moved (possibly fewer than asked: a short
// transfer) or -errno. The backend never retries; the engine does.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tierflow/status.h"

namespace tierflow::offload {

enum class IoOpKind : uint8_t { kRead, kWrite };

struct IoOp {
  IoOpKind kind = IoOpKind::kRead;
  int fd = -1;          // the file descriptor (always set)
  int file_index = -1;  // slot in the registered file table, or -1
  void* buffer = nullptr;
  uint32_t num_bytes = 0;
  uint64_t offset_bytes = 0;
  int buffer_index = -1;   // registered (fixed) buffer holding `buffer`, or -1
  uint64_t user_data = 0;  // returned in the completion
};

struct IoCompletion {
  uint64_t user_data = 0;
  int32_t result = 0;  // bytes moved, or -errno
};

struct IoBackendOptions {
  // Most operations in flight at once; the engine never exceeds it. Default: 32.
  uint32_t queue_depth = 32;
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;

  // Registers `fds` as the fixed file table (indexes = positions). Errors
  // (e.g. an old kernel) leave the backend usable with plain descriptors.
  virtual Status RegisterFiles(std::span<const int> fds) = 0;
  virtual Status UnregisterFiles() = 0;

  // Registers `buffers` as fixed buffers (indexes = positions), replacing an
  // earlier set. Fails with ResourceExhausted/FailedPrecondition when
  // RLIMIT_MEMLOCK is too low; the backend stays usable without them.
  // REQUIRES: no operation in flight.
  virtual Status RegisterBuffers(std::span<const iovec> buffers) = 0;
  virtual Status UnregisterBuffers() = 0;

  // Queues and submits `ops`. REQUIRES: in-flight + ops.size() <= queue_depth.
  // Sets *num_submitted to how many of `ops`, a prefix (the kernel takes the
  // submission queue in order), are in flight and will come back through Reap.
  // On an error the rest may still sit queued in the ring, where a later
  // Submit would issue them: the caller must not reuse their buffers or
  // report them failed before it has destroyed this backend (after reaping
  // everything in flight). With OK, *num_submitted == ops.size().
  virtual Status Submit(std::span<const IoOp> ops, size_t* num_submitted) = 0;

  // Moves up to `out.size()` completions into `out`; returns how many. It
  // first blocks until `min_complete` are there (REQUIRES: at least that many
  // in flight); with 0 it returns at once, possibly with none.
  virtual StatusOr<size_t> Reap(std::span<IoCompletion> out, uint32_t min_complete) = 0;
};

// Makes a backend; one call per ring. Tests pass factories that wrap the
// io_uring backend in a FaultInjectingBackend.
using IoBackendFactory =
    std::function<StatusOr<std::unique_ptr<IoBackend>>(const IoBackendOptions&)>;

}  // namespace tierflow::offload

// The io_uring IoBackend (liburing): one ring, registered files and fixed
// buffers when allowed.
#pragma once

#include <memory>

#include "offload/io_backend.h"

namespace tierflow::offload {

// Creates a ring with `options.queue_depth` entries. Errors: Unavailable when
// io_uring is not usable (disabled by sysctl, seccomp, old kernel), with the
// reason; ResourceExhausted/OutOfMemory when the kernel refuses the ring.
StatusOr<std::unique_ptr<IoBackend>> CreateIoUringBackend(const IoBackendOptions& options);

// The error for a refused fixed-buffer registration (ENOMEM/EPERM mean the
// RLIMIT_MEMLOCK limit): ResourceExhausted naming the limit, else errno's.
Status BufferRegistrationError(int errno_value, size_t num_buffers);

// The default factory: CreateIoUringBackend.
IoBackendFactory IoUringBackendFactory();

}  // namespace tierflow::offload

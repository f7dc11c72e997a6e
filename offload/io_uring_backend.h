// The io_uring IoBackend (liburing): one ring, registered files and fixed
// buffers when allowed, IORING_SETUP_SINGLE_ISSUER since one thread drives it.
#pragma once

#include <memory>

#include "offload/io_backend.h"

namespace tierflow::offload {

// Creates a ring with `options.queue_depth` entries. Errors: Unavailable when
// io_uring is not usable (disabled by sysctl, seccomp, old kernel), with the
// reason; ResourceExhausted/OutOfMemory when the kernel refuses the ring.
StatusOr<std::unique_ptr<IoBackend>> CreateIoUringBackend(const IoBackendOptions& options);

// The default factory: CreateIoUringBackend.
IoBackendFactory IoUringBackendFactory();

}  // namespace tierflow::offload

// io_uring through liburing. user_data is the caller's 64-bit cookie; the
// backend keeps no per-operation state, so every completion maps back to
// exactly one submitted IoOp.
#include "offload/io_uring_backend.h"

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace tierflow::offload {
namespace {

class IoUringBackend final : public IoBackend {
 public:
  explicit IoUringBackend(uint32_t queue_depth) : queue_depth_(queue_depth) {}
  ~IoUringBackend() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  Status Init() {
    io_uring_params params{};
    // The CQ twice the SQ size: completions never overflow when the engine
    // keeps at most queue_depth operations in flight.
    // (No IORING_SETUP_SINGLE_ISSUER: the ring is made on the caller's
    // thread and driven by the engine's, which that flag forbids.)
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = 2 * queue_depth_;
    int rc = io_uring_queue_init_params(queue_depth_, &ring_, &params);
    if (rc < 0) {
      Status s =
          ErrnoStatus(-rc, "io_uring_queue_init with " + std::to_string(queue_depth_) + " entries");
      if (rc == -ENOSYS || rc == -EPERM) {
        return UnavailableError(s.message() +
                                "; io_uring is disabled here (kernel.io_uring_disabled, "
                                "seccomp or an old kernel)");
      }
      return s;
    }
    initialized_ = true;
    return Status::Ok();
  }

  Status RegisterFiles(std::span<const int> fds) override {
    int rc = io_uring_register_files(&ring_, fds.data(), static_cast<unsigned>(fds.size()));
    if (rc < 0) return ErrnoStatus(-rc, "io_uring_register_files");
    files_registered_ = true;
    return Status::Ok();
  }
  Status UnregisterFiles() override {
    if (!files_registered_) return Status::Ok();
    files_registered_ = false;
    int rc = io_uring_unregister_files(&ring_);
    return rc < 0 ? ErrnoStatus(-rc, "io_uring_unregister_files") : Status::Ok();
  }

  Status RegisterBuffers(std::span<const iovec> buffers) override {
    TF_RETURN_IF_ERROR(UnregisterBuffers());
    int rc =
        io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size()));
    if (rc < 0) return BufferRegistrationError(-rc, buffers.size());
    buffers_registered_ = true;
    return Status::Ok();
  }
  Status UnregisterBuffers() override {
    if (!buffers_registered_) return Status::Ok();
    buffers_registered_ = false;
    int rc = io_uring_unregister_buffers(&ring_);
    return rc < 0 ? ErrnoStatus(-rc, "io_uring_unregister_buffers") : Status::Ok();
  }

  Status Submit(std::span<const IoOp> ops, size_t* num_submitted) override {
    *num_submitted = 0;
    for (const IoOp& op : ops) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      // The SQEs prepared so far stay in the ring; the caller tears it down.
      if (sqe == nullptr) {
        return InternalError("io_uring submission queue full: queue depth exceeded");
      }
      int fd = op.file_index >= 0 ? op.file_index : op.fd;
      if (op.kind == IoOpKind::kRead) {
        if (op.buffer_index >= 0) {
          io_uring_prep_read_fixed(sqe, fd, op.buffer, op.num_bytes, op.offset_bytes,
                                   op.buffer_index);
        } else {
          io_uring_prep_read(sqe, fd, op.buffer, op.num_bytes, op.offset_bytes);
        }
      } else {
        if (op.buffer_index >= 0) {
          io_uring_prep_write_fixed(sqe, fd, op.buffer, op.num_bytes, op.offset_bytes,
                                    op.buffer_index);
        } else {
          io_uring_prep_write(sqe, fd, op.buffer, op.num_bytes, op.offset_bytes);
        }
      }
      if (op.file_index >= 0) sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, op.user_data);
    }
    // io_uring_submit may take fewer SQEs than are queued (a partial count,
    // or -EAGAIN/-EBUSY when the kernel is short of resources and took none):
    // this loop submits the rest again at once (spinning while the kernel
    // says -EAGAIN/-EBUSY). A hard error leaves the untaken SQEs published in
    // the submission queue, and liburing cannot take them back: the next
    // io_uring_submit on this ring would issue them. So the error reports how
    // many were taken, and the engine destroys this ring (once what is in
    // flight has completed) before it fails the rest (IoEngine::RingLoop).
    while (io_uring_sq_ready(&ring_) > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
      if (rc < 0) return ErrnoStatus(-rc, "io_uring_submit");
      *num_submitted += static_cast<size_t>(rc);
    }
    return Status::Ok();
  }

  StatusOr<size_t> Reap(std::span<IoCompletion> out, uint32_t min_complete) override {
    if (out.empty()) return size_t{0};
    if (min_complete > 1) {
      // One wake-up for several completions: less CPU per operation.
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe_nr(&ring_, &cqe, min_complete);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIME) {
        return ErrnoStatus(-rc, "io_uring_wait_cqe_nr");
      }
    }
    bool wait = min_complete > 0;
    for (;;) {
      io_uring_cqe* cqes[64];
      unsigned max = static_cast<unsigned>(std::min<size_t>(out.size(), 64));
      unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, max);
      if (n > 0) {
        for (unsigned i = 0; i < n; ++i) {
          out[i].user_data = io_uring_cqe_get_data64(cqes[i]);
          out[i].result = cqes[i]->res;
        }
        io_uring_cq_advance(&ring_, n);
        return size_t{n};
      }
      if (!wait) return size_t{0};
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN) return ErrnoStatus(-rc, "io_uring_wait_cqe");
    }
  }

 private:
  uint32_t queue_depth_;
  io_uring ring_{};
  bool initialized_ = false;
  bool files_registered_ = false;
  bool buffers_registered_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<IoBackend>> CreateIoUringBackend(const IoBackendOptions& options) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return InvalidArgumentError("io_uring queue depth " + std::to_string(options.queue_depth) +
                                " is out of range; use 1..4096");
  }
  auto backend = std::make_unique<IoUringBackend>(options.queue_depth);
  TF_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<IoBackend>(std::move(backend));
}

Status BufferRegistrationError(int errno_value, size_t num_buffers) {
  std::string what = "io_uring_register_buffers (" + std::to_string(num_buffers) + " buffers)";
  if (errno_value == ENOMEM || errno_value == EPERM) {
    return ResourceExhaustedError(ErrnoStatus(errno_value, what).message() +
                                  "; the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) is below "
                                  "the buffers' size: raise it "
                                  "to use fixed buffers (I/O continues without them)");
  }
  return ErrnoStatus(errno_value, what);
}

IoBackendFactory IoUringBackendFactory() {
  return [](const IoBackendOptions& o) { return CreateIoUringBackend(o); };
}

}  // namespace tierflow::offload

// IoEngine: N io_uring rings, each driven by its own thread, moving caller-
// described requests (file, buffer, length, offset) and accounting for every
// completion. Short transfers are resubmitted for the rest, -EAGAIN/-EINTR
// are retried; any other failure completes the request with a Status that
// names the file path, the offset and the operation.
//
// Thread safety: Submit, RegisterBuffers, stats and Drain may be called from
// any thread. Completion callbacks run on ring threads: they must be short and
// must not call Drain or RegisterBuffers.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "offload/io_backend.h"

namespace tierflow::offload {

struct IoEngineOptions {
  // Rings, each with its own thread; requests go round-robin. Default: 1.
  uint32_t num_rings = 1;
  // Operations in flight per ring. Default: 32.
  uint32_t queue_depth = 32;
  // Register the files with every ring (saves an fd lookup per op). Default: true.
  bool register_files = true;
  // Resubmissions of one request after -EAGAIN/-EINTR or a short transfer
  // before it fails. Default: 1000.
  uint32_t max_retries = 1000;
  // Makes each ring's backend. Default (empty): io_uring.
  IoBackendFactory backend_factory;
};

struct IoFile {
  int fd = -1;
  std::string path;  // for error messages
};

// One transfer. The caller owns it and keeps it alive (unchanged) until
// `on_done` has been called; the engine calls it exactly once.
struct IoRequest {
  IoOpKind kind = IoOpKind::kRead;
  uint32_t file = 0;  // index into the engine's files
  void* buffer = nullptr;
  uint32_t num_bytes = 0;
  uint64_t offset_bytes = 0;
  // OK when all num_bytes moved; otherwise the error (path, offset, errno).
  std::function<void(Status)> on_done;

  // Engine-private progress.
  uint32_t done_bytes_ = 0;
  uint32_t retries_ = 0;
};

struct IoEngineStats {
  uint64_t num_completed = 0;
  uint64_t num_failed = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t num_short_resubmits = 0;
  uint64_t num_eagain_retries = 0;
  bool files_registered = false;
  std::string files_not_registered_reason;  // empty when registered or not asked
  bool fixed_buffers_registered = false;
  std::string fixed_buffers_reason;  // why not registered; empty when they are
  std::string last_reap_error;       // a failed wait for completions (retried)
};

class IoEngine {
 public:
  // Starts the rings and their threads. Errors: those of the backend factory
  // (Unavailable when io_uring cannot be used), InvalidArgument for options.
  // A refused file registration is not an error: it is reported in stats().
  static StatusOr<std::unique_ptr<IoEngine>> Create(const IoEngineOptions& options,
                                                    std::vector<IoFile> files);
  // Waits for every submitted request to complete, then stops the threads.
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Queues `request` on the next ring. Never blocks on I/O.
  void Submit(IoRequest* request);
  // Queues `requests` in order, split into runs over the rings; one lock and
  // one wake-up per ring instead of per request.
  void Submit(std::span<IoRequest* const> requests);

  // Registers `buffers` as fixed buffers on every ring, replacing an earlier
  // set (empty = unregister). Later requests whose bytes lie inside one of
  // them use it. Waits for in-flight requests of each ring first. When the
  // kernel refuses (RLIMIT_MEMLOCK), every ring continues without fixed
  // buffers and the error is returned and kept in stats().
  Status RegisterBuffers(std::vector<iovec> buffers);

  // Blocks until every request submitted before the call has completed.
  void Drain();

  IoEngineStats stats() const;
  const IoFile& file(uint32_t index) const { return files_[index]; }
  uint32_t num_rings() const { return static_cast<uint32_t>(rings_.size()); }

 private:
  struct Ring;
  explicit IoEngine(const IoEngineOptions& options, std::vector<IoFile> files);
  void RingLoop(Ring& ring);
  // Settles the requests of `got` (completing them or queueing them on
  // `retry`), counting them out of `in_flight`. Ring thread only.
  void Settle(std::span<const IoCompletion> got, uint32_t& in_flight,
              std::deque<IoRequest*>& retry);
  // Destroys `ring`'s backend, dropping what is still queued in it unissued,
  // and makes a fresh one with the ring's files and fixed buffers.
  // REQUIRES: nothing in flight on the ring; ring thread only. On error the
  // ring is left without a backend.
  Status ReplaceBackend(Ring& ring);
  // Runs `fn` on each ring's thread when that ring has nothing in flight.
  std::vector<Status> RunOnEachRing(const std::function<Status(Ring&)>& fn);
  void Complete(IoRequest* request, Status status);

  IoEngineOptions options_;
  std::vector<IoFile> files_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::atomic<uint32_t> next_ring_{0};

  std::atomic<uint64_t> num_completed_{0}, num_failed_{0}, bytes_read_{0}, bytes_written_{0};
  std::atomic<uint64_t> num_short_resubmits_{0}, num_eagain_retries_{0};
  std::atomic<uint64_t> num_submitted_{0};
  mutable std::mutex stats_mu_;
  // The registration and reap fields of stats() (its counters are the
  // atomics above, left zero here). Guarded by stats_mu_.
  IoEngineStats noted_;

  std::mutex drain_mu_;
  std::condition_variable drain_cv_;
};

}  // namespace tierflow::offload

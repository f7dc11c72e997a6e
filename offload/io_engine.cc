// The ring threads. Each ring keeps at most queue_depth operations in flight;
// a request whose transfer came back short or with -EAGAIN goes back on the
// ring's local retry list with its progress, so every request ends in exactly
// one on_done call and every completion is matched to its request through
// user_data (the request's address). A failed submit never fails an
// operation that may still sit in the ring: the ring is drained, destroyed and
// remade first (see the submit path in RingLoop).
#include "offload/io_engine.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <utility>

#include "offload/io_uring_backend.h"

namespace tierflow::offload {

struct IoEngine::Ring {
  std::unique_ptr<IoBackend> backend;
  bool files_registered = false;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<IoRequest*> queue;  // guarded by mu
  bool stop = false;             // guarded by mu
  // A task to run on the ring thread once nothing is in flight (guarded by mu).
  const std::function<Status(Ring&)>* control = nullptr;
  Status control_result;
  bool control_done = false;
  std::condition_variable control_cv;

  // Fixed buffers as this ring registered them; touched only by its thread.
  std::vector<iovec> fixed;
  // Why `backend` is null: a submit failed and no fresh ring could be made
  // (ring thread only).
  Status broken;

  std::thread thread;
};

IoEngine::IoEngine(const IoEngineOptions& options, std::vector<IoFile> files)
    : options_(options), files_(std::move(files)) {}

StatusOr<std::unique_ptr<IoEngine>> IoEngine::Create(const IoEngineOptions& options,
                                                     std::vector<IoFile> files) {
  if (options.num_rings < 1 || options.num_rings > 64) {
    return InvalidArgumentError("number of io_uring rings " + std::to_string(options.num_rings) +
                                " is out of range; use 1..64");
  }
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return InvalidArgumentError("queue depth " + std::to_string(options.queue_depth) +
                                " is out of range; use 1..4096");
  }
  std::unique_ptr<IoEngine> engine(new IoEngine(options, std::move(files)));
  IoBackendFactory factory =
      options.backend_factory ? options.backend_factory : IoUringBackendFactory();
  std::vector<int> fds;
  for (const IoFile& f : engine->files_) fds.push_back(f.fd);
  bool all_registered = options.register_files && !fds.empty();
  for (uint32_t i = 0; i < options.num_rings; ++i) {
    auto ring = std::make_unique<Ring>();
    TF_ASSIGN_OR_RETURN(ring->backend, factory(IoBackendOptions{options.queue_depth}));
    if (options.register_files && !fds.empty()) {
      Status s = ring->backend->RegisterFiles(fds);
      ring->files_registered = s.ok();
      if (!s.ok()) {
        all_registered = false;
        engine->noted_.files_not_registered_reason = s.ToString();
      }
    }
    engine->rings_.push_back(std::move(ring));
  }
  engine->noted_.files_registered = all_registered;
  for (auto& ring : engine->rings_) {
    Ring* r = ring.get();
    IoEngine* e = engine.get();
    r->thread = std::thread([e, r] { e->RingLoop(*r); });
  }
  return engine;
}

IoEngine::~IoEngine() {
  for (auto& ring : rings_) {
    {
      std::lock_guard<std::mutex> lock(ring->mu);
      ring->stop = true;
    }
    ring->cv.notify_all();
  }
  for (auto& ring : rings_) {
    if (ring->thread.joinable()) ring->thread.join();
  }
  for (auto& ring : rings_) {
    if (ring->backend == nullptr) continue;  // lost to a submit failure
    (void)ring->backend->UnregisterBuffers();
    (void)ring->backend->UnregisterFiles();
  }
}

void IoEngine::Submit(IoRequest* request) {
  request->done_bytes_ = 0;
  request->retries_ = 0;
  num_submitted_.fetch_add(1, std::memory_order_relaxed);
  Ring& ring = *rings_[next_ring_.fetch_add(1, std::memory_order_relaxed) % rings_.size()];
  {
    std::lock_guard<std::mutex> lock(ring.mu);
    ring.queue.push_back(request);
  }
  ring.cv.notify_one();
}

void IoEngine::Submit(std::span<IoRequest* const> requests) {
  if (requests.empty()) return;
  for (IoRequest* r : requests) {
    r->done_bytes_ = 0;
    r->retries_ = 0;
  }
  num_submitted_.fetch_add(requests.size(), std::memory_order_relaxed);
  size_t n = rings_.size();
  size_t per_ring = (requests.size() + n - 1) / n;
  uint32_t first = next_ring_.fetch_add(1, std::memory_order_relaxed);
  for (size_t at = 0, k = 0; at < requests.size(); at += per_ring, ++k) {
    Ring& ring = *rings_[(first + k) % n];
    {
      std::lock_guard<std::mutex> lock(ring.mu);
      for (size_t i = at; i < std::min(requests.size(), at + per_ring); ++i)
        ring.queue.push_back(requests[i]);
    }
    ring.cv.notify_one();
  }
}

void IoEngine::Complete(IoRequest* request, Status status) {
  bool ok = status.ok();
  // on_done may free the request (it belongs to the caller): move the callback out first.
  std::function<void(Status)> done = std::move(request->on_done);
  done(std::move(status));
  done = nullptr;  // drop what it holds before the request counts as complete
  // Counted after on_done has returned, so Drain() means "all callbacks ran".
  {
    std::lock_guard<std::mutex> lock(drain_mu_);
    (ok ? num_completed_ : num_failed_).fetch_add(1, std::memory_order_relaxed);
  }
  drain_cv_.notify_all();
}

void IoEngine::Drain() {
  uint64_t target = num_submitted_.load();
  std::unique_lock<std::mutex> lock(drain_mu_);
  drain_cv_.wait(lock, [&] { return num_completed_.load() + num_failed_.load() >= target; });
}

namespace {

std::string Describe(const IoRequest& r, const IoFile& f) {
  return std::string(r.kind == IoOpKind::kRead ? "read " : "write ") +
         std::to_string(r.num_bytes - r.done_bytes_) + " bytes of " + f.path + " at offset " +
         std::to_string(r.offset_bytes + r.done_bytes_);
}

int FindFixed(const std::vector<iovec>& fixed, const void* p, uint32_t num_bytes) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  for (size_t i = 0; i < fixed.size(); ++i) {
    auto base = reinterpret_cast<uintptr_t>(fixed[i].iov_base);
    if (addr >= base && addr + num_bytes <= base + fixed[i].iov_len) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

void IoEngine::RingLoop(Ring& ring) {
  const uint32_t qd = options_.queue_depth;
  std::deque<IoRequest*> retry;  // resubmissions, ahead of new work
  std::vector<IoOp> ops;
  std::vector<IoRequest*> batch;
  std::vector<IoCompletion> completions(qd);
  uint32_t in_flight = 0;
  // Reaps at least `min_complete` completions and settles their requests.
  auto reap = [&](uint32_t min_complete) {
    StatusOr<size_t> got = ring.backend->Reap(completions, min_complete);
    if (!got.ok()) {
      // The kernel still owns the buffers of what is in flight, so those
      // requests cannot be failed early; record the reason and try again.
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        noted_.last_reap_error = got.status().ToString();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    Settle(std::span<const IoCompletion>(completions.data(), *got), in_flight, retry);
  };
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(ring.mu);
      if (in_flight == 0 && retry.empty()) {
        if (ring.control != nullptr) {
          ring.control_result = (*ring.control)(ring);
          ring.control = nullptr;
          ring.control_done = true;
          ring.control_cv.notify_all();
        }
        ring.cv.wait(lock,
                     [&] { return !ring.queue.empty() || ring.stop || ring.control != nullptr; });
        if (ring.control != nullptr) continue;
        if (ring.queue.empty() && ring.stop) return;
      }
      // While a control task waits, take no new work so the ring drains.
      while (ring.control == nullptr && !ring.queue.empty() &&
             in_flight + retry.size() + batch.size() < qd) {
        batch.push_back(ring.queue.front());
        ring.queue.pop_front();
      }
    }
    ops.clear();
    auto add_op = [&](IoRequest* r) {
      IoOp op;
      op.kind = r->kind;
      op.fd = files_[r->file].fd;
      op.file_index = ring.files_registered ? static_cast<int>(r->file) : -1;
      op.buffer = static_cast<uint8_t*>(r->buffer) + r->done_bytes_;
      op.num_bytes = r->num_bytes - r->done_bytes_;
      op.offset_bytes = r->offset_bytes + r->done_bytes_;
      op.buffer_index = ring.fixed.empty() ? -1 : FindFixed(ring.fixed, op.buffer, op.num_bytes);
      op.user_data = reinterpret_cast<uint64_t>(r);
      ops.push_back(op);
    };
    while (!retry.empty() && in_flight + ops.size() < qd) {
      add_op(retry.front());
      retry.pop_front();
    }
    for (IoRequest* r : batch) add_op(r);
    if (!ops.empty()) {
      if (ring.backend == nullptr) {
        // An earlier submit failure left this ring without a backend.
        for (const IoOp& op : ops) {
          auto* r = reinterpret_cast<IoRequest*>(op.user_data);
          Complete(r, ring.broken.WithContext(Describe(*r, files_[r->file])));
        }
        continue;
      }
      size_t num_submitted = 0;
      Status s = ring.backend->Submit(ops, &num_submitted);
      num_submitted = std::min(num_submitted, ops.size());
      in_flight += static_cast<uint32_t>(num_submitted);
      if (!s.ok()) {
        // The ops the kernel did not take may still be queued in the ring,
        // where the next submit would issue them into buffers whose owners
        // were told they failed. So: let everything in flight complete (the
        // kernel owns those buffers), destroy the ring with what it still
        // queues, make a fresh one, and only then fail the untaken ops.
        while (in_flight > 0) reap(in_flight);
        Status rebuilt = ReplaceBackend(ring);
        for (size_t i = num_submitted; i < ops.size(); ++i) {
          auto* r = reinterpret_cast<IoRequest*>(ops[i].user_data);
          Complete(r, s.WithContext(Describe(*r, files_[r->file])));
        }
        if (!rebuilt.ok()) {
          ring.broken =
              rebuilt.WithContext("after " + s.ToString() + ", remaking the io_uring ring");
        }
        continue;
      }
    }
    if (in_flight == 0) continue;
    // Block for completions unless a retry can be submitted right away. With
    // a deep queue, wait until a quarter of it has drained: one wake-up then
    // reaps and refills several operations while the drive still has three
    // quarters of the queue to work on.
    uint32_t min_complete = 0;
    if (retry.empty() || in_flight >= qd) {
      uint32_t keep = qd - qd / 4;
      min_complete = in_flight > keep ? in_flight - keep : 1;
    }
    reap(min_complete);
  }
}

Status IoEngine::ReplaceBackend(Ring& ring) {
  // Destroying the backend closes the ring: the SQEs still queued in it are
  // dropped unissued (nothing is in flight, so the kernel holds no buffer).
  ring.backend.reset();
  IoBackendFactory factory =
      options_.backend_factory ? options_.backend_factory : IoUringBackendFactory();
  StatusOr<std::unique_ptr<IoBackend>> fresh = factory(IoBackendOptions{options_.queue_depth});
  if (!fresh.ok()) return fresh.status();
  ring.backend = std::move(fresh).value();
  if (ring.files_registered) {
    std::vector<int> fds;
    for (const IoFile& f : files_) fds.push_back(f.fd);
    // Plain descriptors work too: a refusal only costs an fd lookup per op.
    ring.files_registered = ring.backend->RegisterFiles(fds).ok();
  }
  if (!ring.fixed.empty()) {
    Status s = ring.backend->RegisterBuffers(ring.fixed);
    if (!s.ok()) {
      // This ring goes on without them (the others keep theirs); say so.
      ring.fixed.clear();
      std::lock_guard<std::mutex> lock(stats_mu_);
      noted_.fixed_buffers_registered = false;
      noted_.fixed_buffers_reason =
          s.WithContext("re-registering after a ring was remade").ToString();
    }
  }
  return Status::Ok();
}

void IoEngine::Settle(std::span<const IoCompletion> got, uint32_t& in_flight,
                      std::deque<IoRequest*>& retry) {
  for (size_t i = 0; i < got.size(); ++i) {
    --in_flight;
    auto* r = reinterpret_cast<IoRequest*>(got[i].user_data);
    int32_t res = got[i].result;
    const IoFile& f = files_[r->file];
    if (res == -EAGAIN || res == -EINTR) {
      num_eagain_retries_.fetch_add(1, std::memory_order_relaxed);
      if (++r->retries_ > options_.max_retries) {
        Complete(r, ErrnoStatus(-res, Describe(*r, f) + " (gave up after " +
                                          std::to_string(options_.max_retries) + " retries)"));
      } else {
        retry.push_back(r);
      }
      continue;
    }
    if (res < 0) {
      Complete(r, ErrnoStatus(-res, Describe(*r, f)));
      continue;
    }
    if (res == 0 && r->kind == IoOpKind::kRead) {
      Complete(r, DataLossError(Describe(*r, f) + ": unexpected end of file; the file is "
                                                  "shorter than its header says (truncated)"));
      continue;
    }
    auto moved = static_cast<uint32_t>(res);
    if (r->kind == IoOpKind::kRead) {
      bytes_read_.fetch_add(moved, std::memory_order_relaxed);
    } else {
      bytes_written_.fetch_add(moved, std::memory_order_relaxed);
    }
    r->done_bytes_ += moved;
    if (r->done_bytes_ < r->num_bytes) {
      num_short_resubmits_.fetch_add(1, std::memory_order_relaxed);
      if (++r->retries_ > options_.max_retries) {
        Complete(r, IoError(Describe(*r, f) + ": transfer stayed short after " +
                            std::to_string(options_.max_retries) + " resubmissions"));
      } else {
        retry.push_back(r);
      }
      continue;
    }
    Complete(r, Status::Ok());
  }
}

std::vector<Status> IoEngine::RunOnEachRing(const std::function<Status(Ring&)>& fn) {
  std::vector<Status> results;
  for (auto& ring : rings_) {
    std::unique_lock<std::mutex> lock(ring->mu);
    ring->control_done = false;
    ring->control = &fn;
    ring->cv.notify_all();
    ring->control_cv.wait(lock, [&] { return ring->control_done; });
    results.push_back(ring->control_result);
  }
  return results;
}

Status IoEngine::RegisterBuffers(std::vector<iovec> buffers) {
  std::vector<Status> results = RunOnEachRing([&buffers](Ring& ring) -> Status {
    ring.fixed.clear();
    if (ring.backend == nullptr) return ring.broken;
    if (buffers.empty()) return ring.backend->UnregisterBuffers();
    Status s = ring.backend->RegisterBuffers(buffers);
    if (s.ok()) ring.fixed = buffers;
    return s;
  });
  Status first_error;
  for (const Status& s : results) {
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (!first_error.ok() && !buffers.empty()) {
    // All rings or none: a partial set would make throughput depend on the ring.
    (void)RunOnEachRing([](Ring& ring) {
      ring.fixed.clear();
      return ring.backend == nullptr ? Status::Ok() : ring.backend->UnregisterBuffers();
    });
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  noted_.fixed_buffers_registered = first_error.ok() && !buffers.empty();
  noted_.fixed_buffers_reason =
      first_error.ok() ? (buffers.empty() ? "no buffers registered" : "") : first_error.ToString();
  return first_error;
}

IoEngineStats IoEngine::stats() const {
  IoEngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = noted_;
  }
  s.num_completed = num_completed_.load();
  s.num_failed = num_failed_.load();
  s.bytes_read = bytes_read_.load();
  s.bytes_written = bytes_written_.load();
  s.num_short_resubmits = num_short_resubmits_.load();
  s.num_eagain_retries = num_eagain_retries_.load();
  return s;
}

}  // namespace tierflow::offload

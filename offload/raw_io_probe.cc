// The raw io_uring loop: the least work per block that io_uring allows (no
// threads, no checksums, no map), so its speed is the limit for the store.
#include "offload/raw_io_probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <vector>

#include "offload/aligned_buffer.h"

namespace tierflow::offload {
namespace {

// Moves [0, num_bytes) of `fd` in blocks with up to queue_depth in flight.
Status Pass(io_uring& ring, int fd, bool write, const std::vector<uint8_t*>& buffers,
            uint64_t num_bytes, uint32_t block, const std::string& path) {
  const uint64_t num_blocks = num_bytes / block;
  uint64_t next = 0, completed = 0;
  std::vector<uint64_t> free_slots;
  for (uint64_t i = 0; i < buffers.size(); ++i) free_slots.push_back(i);
  while (completed < num_blocks) {
    while (next < num_blocks && !free_slots.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) break;
      uint64_t slot = free_slots.back();
      free_slots.pop_back();
      if (write) {
        io_uring_prep_write(sqe, fd, buffers[slot], block, next * block);
      } else {
        io_uring_prep_read(sqe, fd, buffers[slot], block, next * block);
      }
      io_uring_sqe_set_data64(sqe, slot);
      ++next;
    }
    int rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN) return ErrnoStatus(-rc, "io_uring_submit " + path);
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      if (cqe->res != static_cast<int>(block)) {
        // The probe is only a yardstick: a short or failed transfer is an error, not retried.
        int err = cqe->res < 0 ? -cqe->res : EIO;
        io_uring_cq_advance(&ring, seen);
        return ErrnoStatus(err, std::string(write ? "write " : "read ") + path +
                                    " (probe; result " + std::to_string(cqe->res) + ")");
      }
      free_slots.push_back(io_uring_cqe_get_data64(cqe));
      ++completed;
    }
    io_uring_cq_advance(&ring, seen);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<RawIoProbeResult> RunRawIoProbe(const RawIoProbeOptions& o) {
  if (o.block_size_bytes == 0 || o.block_size_bytes % kDirectIoAlignment != 0) {
    return InvalidArgumentError("probe block size must be a positive multiple of 4096");
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096)
    return InvalidArgumentError("probe queue depth must be 1..4096");
  static std::atomic<uint32_t> counter{0};
  std::string path =
      (std::filesystem::path(o.directory) / ("tierflow-raw-probe-" + std::to_string(getpid()) +
                                             "-" + std::to_string(counter.fetch_add(1)) + ".tmp"))
          .string();
  TF_ASSIGN_OR_RETURN(int fd, OpenSwapFile(path, o.io_mode, /*create=*/true));
  struct FileGuard {
    int fd;
    std::string path;
    ~FileGuard() {
      close(fd);
      unlink(path.c_str());
    }
  } guard{fd, path};

  RawIoProbeResult r;
  r.num_bytes = RoundUp(o.num_bytes, o.block_size_bytes);
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(r.num_bytes));
  if (rc != 0 && rc != EOPNOTSUPP) return ErrnoStatus(rc, "reserve space for probe file " + path);

  uint32_t depth =
      static_cast<uint32_t>(std::min<uint64_t>(o.queue_depth, r.num_bytes / o.block_size_bytes));
  std::vector<AlignedBuffer> owned;
  std::vector<uint8_t*> buffers;
  for (uint32_t i = 0; i < depth; ++i) {
    TF_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(o.block_size_bytes));
    for (size_t j = 0; j < b.num_bytes(); j += 8) b.data()[j] = static_cast<uint8_t>(i + j);
    buffers.push_back(b.data());
    owned.push_back(std::move(b));
  }
  io_uring ring{};
  rc = io_uring_queue_init(depth, &ring, 0);
  if (rc < 0) return ErrnoStatus(-rc, "io_uring_queue_init for the probe");
  struct RingGuard {
    io_uring* ring;
    ~RingGuard() { io_uring_queue_exit(ring); }
  } ring_guard{&ring};

  using Clock = std::chrono::steady_clock;
  auto tf = Clock::now();
  TF_RETURN_IF_ERROR(
      Pass(ring, fd, /*write=*/true, buffers, r.num_bytes, o.block_size_bytes, path));
  auto t0 = Clock::now();
  TF_RETURN_IF_ERROR(
      Pass(ring, fd, /*write=*/true, buffers, r.num_bytes, o.block_size_bytes, path));
  auto t1 = Clock::now();
  TF_RETURN_IF_ERROR(
      Pass(ring, fd, /*write=*/false, buffers, r.num_bytes, o.block_size_bytes, path));
  auto t2 = Clock::now();
  r.first_write_seconds = std::chrono::duration<double>(t0 - tf).count();
  r.write_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.read_seconds = std::chrono::duration<double>(t2 - t1).count();
  r.first_write_gb_per_second = static_cast<double>(r.num_bytes) / r.first_write_seconds / 1e9;
  r.write_gb_per_second = static_cast<double>(r.num_bytes) / r.write_seconds / 1e9;
  r.read_gb_per_second = static_cast<double>(r.num_bytes) / r.read_seconds / 1e9;
  return r;
}

}  // namespace tierflow::offload

// One write pass and one read pass through a fresh StateStore.
#include "offload/store_throughput.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>
#include <system_error>

#include "offload/aligned_buffer.h"
#include "offload/state_store.h"

namespace tierflow::offload {
namespace {

using Clock = std::chrono::steady_clock;

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

uint8_t Pattern(uint32_t slot, size_t byte) { return static_cast<uint8_t>(slot * 31 + byte / 64); }

namespace fs = std::filesystem;
constexpr char kPrivatePrefix[] = "tierflow-probe-";

// Removes DIR/tierflow-probe-PID-N left by a process that no longer runs (it
// was killed while measuring). Best effort: what cannot be removed stays.
void RemoveLeftovers(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrivatePrefix, 0) != 0 || entry.is_symlink(ec)) continue;
    const std::string rest = name.substr(sizeof(kPrivatePrefix) - 1);
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos) continue;
    const std::string pid_text = rest.substr(0, dash);
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);
  }
}

// DIR/tierflow-probe-PID-N for each directory, removed when it goes out of
// scope: the measuring swap set never sits in DIR/tierflow-swap, where a
// crash would leave a stale set that blocks the next run there.
class PrivateDirectories {
 public:
  static StatusOr<PrivateDirectories> Create(const std::vector<std::string>& dirs) {
    static std::atomic<uint32_t> counter{0};
    const std::string name =
        kPrivatePrefix + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
    PrivateDirectories p;
    for (const std::string& d : dirs) {
      std::error_code ec;
      if (!fs::is_directory(d, ec)) {
        return NotFoundError("state directory " + d + " does not exist or is not a directory");
      }
      RemoveLeftovers(d);
      const std::string path = (fs::path(d) / name).string();
      if (!fs::create_directory(path, ec)) {
        if (ec) return ErrnoStatus(ec.value(), "create directory " + path);
        return InvalidArgumentError("state directory " + d +
                                    " is listed twice; give each drive once");
      }
      p.paths_.push_back(path);
    }
    return p;
  }
  PrivateDirectories() = default;
  PrivateDirectories(PrivateDirectories&& o) noexcept : paths_(std::move(o.paths_)) {
    o.paths_.clear();
  }
  PrivateDirectories& operator=(PrivateDirectories&&) = delete;
  ~PrivateDirectories() {
    for (const std::string& p : paths_) {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::vector<std::string> paths_;
};

}  // namespace

StatusOr<StoreThroughputResult> MeasureStoreThroughput(const StoreThroughputOptions& o) {
  TF_RETURN_IF_ERROR(ValidateNvmeIoSettings(o.io, "store settings"));
  if (o.chunk_bytes == 0 || o.chunk_bytes % 4096 != 0) {
    return InvalidArgumentError("transfer size " + std::to_string(o.chunk_bytes) +
                                " bytes is not a positive multiple of 4096");
  }
  if (o.num_bytes == 0) return InvalidArgumentError("nothing to move: 0 bytes");
  if (o.in_flight < 1 || o.in_flight > 64) {
    return InvalidArgumentError("transfers in flight " + std::to_string(o.in_flight) +
                                " is out of range; use 1..64");
  }
  if (o.directories.empty()) return InvalidArgumentError("no directory to measure; name one");
  TF_ASSIGN_OR_RETURN(PrivateDirectories private_dirs, PrivateDirectories::Create(o.directories));
  StateStoreOptions so;
  so.directories = private_dirs.paths();
  so.run_id = "throughput-" + MakeRunId();
  so.block_size_bytes = o.io.block_size_bytes;
  so.queue_depth = o.io.queue_depth;
  so.num_rings = o.io.num_rings;
  so.io_mode = o.io_mode;
  // Room for the rewrites in flight (each lands on new blocks, the old ones
  // are freed when it commits), as the NVMe tier keeps for its slots.
  const uint64_t chunk_blocks_bytes =
      (o.chunk_bytes + o.io.block_size_bytes - 1) / o.io.block_size_bytes * o.io.block_size_bytes;
  so.spare_bytes_per_directory = (uint64_t{o.in_flight} + 1) * chunk_blocks_bytes;
  std::vector<TensorSpec> tensors;
  for (uint64_t at = 0, i = 0; at < o.num_bytes; at += o.chunk_bytes, ++i) {
    tensors.push_back({"throughput." + std::to_string(i) + "/state", DType::kF32,
                       std::min(o.chunk_bytes, o.num_bytes - at)});
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, StateStore::Create(so, tensors));
  const uint32_t slots =
      static_cast<uint32_t>(std::min<uint64_t>(o.in_flight, static_cast<uint64_t>(tensors.size())));
  std::vector<AlignedBuffer> buffers;
  std::vector<iovec> iov;
  for (uint32_t s = 0; s < slots; ++s) {
    TF_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(o.chunk_bytes));
    for (size_t j = 0; j < b.num_bytes(); j += 64) b.data()[j] = Pattern(s, j);
    iov.push_back({b.data(), b.num_bytes()});
    buffers.push_back(std::move(b));
  }
  // A refusal (memlock) is reported in the result, not fatal.
  if (o.fixed_buffers) (void)store->RegisterBuffers(iov);

  std::vector<IoTicket> tickets(slots);
  // Moves tensors [0, count) one way; returns the seconds it took.
  auto pass = [&](bool write, size_t count) -> StatusOr<double> {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      const uint32_t s = static_cast<uint32_t>(i % slots);
      TF_RETURN_IF_ERROR(tickets[s].Wait());
      const auto id = static_cast<TensorId>(i);
      StatusOr<IoTicket> t = write
                                 ? store->WriteAsync(id, buffers[s].data(), 0, tensors[i].num_bytes)
                                 : store->ReadAsync(id, buffers[s].data(), 0, tensors[i].num_bytes);
      if (!t.ok()) return t.status();
      tickets[s] = *t;
    }
    for (IoTicket& t : tickets) TF_RETURN_IF_ERROR(t.Wait());
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  StoreThroughputResult r;
  const size_t n = tensors.size();
  // First writes land on freshly reserved blocks. Rewriting the first few
  // tensors then puts the spare blocks to use (also reserved, unwritten) and
  // frees written ones in their place, so the timed rewrite lands on written
  // blocks only: the store's steady state from the second optimizer step on.
  TF_ASSIGN_OR_RETURN(r.first_write_seconds, pass(/*write=*/true, n));
  const uint64_t spare_total = so.spare_bytes_per_directory * o.directories.size();
  const size_t warm =
      static_cast<size_t>(std::min<uint64_t>(n, (spare_total + o.chunk_bytes - 1) / o.chunk_bytes));
  TF_RETURN_IF_ERROR(pass(/*write=*/true, warm).status());
  const double cpu0 = ProcessCpuSeconds();
  TF_ASSIGN_OR_RETURN(r.write_seconds, pass(/*write=*/true, n));
  TF_ASSIGN_OR_RETURN(r.read_seconds, pass(/*write=*/false, n));
  r.cpu_seconds = ProcessCpuSeconds() - cpu0;
  // The store verified every block's CRC32C; check the bytes came back to
  // where they belong too. Slot s last held the last tensor i with i % slots == s.
  for (uint32_t s = 0; s < slots; ++s) {
    size_t last = s;
    while (last + slots < tensors.size()) last += slots;
    for (size_t j = 0; j < tensors[last].num_bytes; j += 64) {
      if (buffers[s].data()[j] != Pattern(s, j)) {
        return InternalError(
            "store throughput: data read back differs from what was written "
            "(tensor " +
            std::to_string(last) + ", byte " + std::to_string(j) + ")");
      }
    }
  }
  const StateStoreStats st = store->stats();
  r.num_bytes = o.num_bytes;
  r.first_write_gb_per_second = static_cast<double>(o.num_bytes) / r.first_write_seconds / 1e9;
  r.write_gb_per_second = static_cast<double>(o.num_bytes) / r.write_seconds / 1e9;
  r.read_gb_per_second = static_cast<double>(o.num_bytes) / r.read_seconds / 1e9;
  r.fixed_buffers = st.engine.fixed_buffers_registered;
  r.fixed_buffers_reason = o.fixed_buffers ? st.engine.fixed_buffers_reason : "not asked for";
  r.files_registered = st.engine.files_registered;
  TF_RETURN_IF_ERROR(store->Close());
  return r;
}

}  // namespace tierflow::offload

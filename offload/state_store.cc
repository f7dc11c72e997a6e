// The state store: layout of tensors over directories, the block map with
// write-to-new-block commits, per-block CRC32C, tickets, and the life cycle
// of the swap set (create, open, sync, close).
#include "offload/state_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include "common/units.h"
#include "offload/aligned_buffer.h"
#include "offload/crc32c.h"
#include "offload/swap_reader.h"

namespace tierflow::offload {

namespace fs = std::filesystem;

struct StateStore::Directory {
  std::string dir;   // the state directory given in the options
  std::string path;  // its swap file
  int fd = -1;
  RunLock lock;
  SwapFileHeader header;
  uint64_t spare_blocks = 0;
  // Guarded by the store's mu_.
  std::vector<uint32_t> physical;         // per logical block, kUnmappedBlock = never written
  std::vector<uint32_t> crc;              // per logical block
  std::deque<uint32_t> free;              // FIFO keeps rewrites close to sequential
  std::vector<uint16_t> readers;          // per physical block: reads in flight
  std::vector<uint8_t> free_when_unread;  // per physical block
  uint64_t table_sequence = 0;
};

namespace internal {

// Write blocks checksummed before they are handed to the engine together:
// up to this many, and no more once they hold kBytesPerBatch, so the drive
// starts on a large block as soon as it is checksummed.
constexpr size_t kBlocksPerBatch = 4;
constexpr uint64_t kBytesPerBatch = 4ull << 20;

struct BlockOp {
  IoRequest request;
  uint32_t dir = 0;
  uint64_t local_block = 0;
  uint64_t tensor_block = 0;
  uint32_t physical = 0;  // read: the block read; write: the new block
  uint32_t crc = 0;       // read: expected; write: computed
  uint32_t valid_bytes = 0;
  bool done = false;  // its I/O has completed (guarded by the ticket's mu)
};

struct TicketState {
  StateStore* store = nullptr;  // only while I/O is in flight (the store drains before closing)
  TensorId tensor = 0;
  IoOpKind kind = IoOpKind::kRead;
  uint32_t block_size_bytes = 0;
  std::vector<BlockOp> blocks;  // never resized once submitted: the engine holds &request
  // For verification in Wait(), which may run after the store is gone.
  std::string tensor_name;
  std::vector<std::string> paths;  // per directory
  std::shared_ptr<std::atomic<uint64_t>> checksum_mismatches;

  std::mutex mu;  // guards the I/O state below (ring threads write it)
  std::condition_variable cv;
  size_t remaining = 0;
  Status io_error;
  bool io_done = false;

  std::mutex verify_mu;  // the first Wait() verifies reads; later ones reuse the result
  bool verified = false;
  Status result;

  // A ticket of `store` for the blocks that `num_bytes` at `offset_bytes` of
  // tensor `id` cover, each mapped to its directory and local block.
  static std::shared_ptr<TicketState> ForRange(StateStore& store, TensorId id, IoOpKind kind,
                                               uint64_t offset_bytes, uint64_t num_bytes);
  // The request of `block` (mapped, its physical block chosen): the ticket's
  // kind, whole pages of `buffer`, at its place in its file; completing into
  // this ticket, which `self` keeps alive until then.
  void PrepareRequest(BlockOp& block, uint8_t* buffer, uint64_t data_offset_bytes,
                      const std::shared_ptr<TicketState>& self);
  void OnBlockDone(BlockOp& block, Status status);
  // Waits for the I/O; for reads, verifies each block's CRC32C as soon as
  // that block has landed, overlapping the checksums with the rest of the
  // transfer. Returns the I/O error, else the first mismatch, else OK.
  Status WaitAndVerify();
};

}  // namespace internal

using internal::BlockOp;
using internal::kBlocksPerBatch;
using internal::kBytesPerBatch;
using internal::TicketState;

Status IoTicket::Wait() const {
  if (!state_) return Status::Ok();
  // The first waiter verifies; later (or concurrent) ones get its result.
  std::lock_guard<std::mutex> lock(state_->verify_mu);
  if (!state_->verified) {
    state_->result = state_->WaitAndVerify();
    state_->verified = true;
  }
  return state_->result;
}

bool IoTicket::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->io_done;
}

namespace {

std::string BlockContext(const TensorSpec& t, uint64_t block, uint32_t block_size, uint32_t valid) {
  uint64_t begin = block * block_size;
  return "tensor '" + t.name + "' block " + std::to_string(block) + " (bytes [" +
         std::to_string(begin) + ", " + std::to_string(begin + valid) + "))";
}

Status PwriteAll(int fd, const uint8_t* data, size_t num_bytes, uint64_t offset,
                 const std::string& path) {
  size_t done = 0;
  while (done < num_bytes) {
    ssize_t n = pwrite(fd, data + done, num_bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return ErrnoStatus(errno, "write " + path + " at offset " + std::to_string(offset + done));
    if (n == 0)
      return IoError("write " + path + " at offset " + std::to_string(offset + done) +
                     ": wrote nothing");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status Fdatasync(int fd, const std::string& path) {
  if (fdatasync(fd) != 0) return ErrnoStatus(errno, "fdatasync " + path);
  return Status::Ok();
}

Status ValidateOptions(const StateStoreOptions& o) {
  if (o.directories.empty())
    return InvalidArgumentError("no state directory given; name at least one");
  std::set<std::string> seen;
  for (const std::string& d : o.directories) {
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(d, ec).string();
    if (!seen.insert(ec ? d : canonical).second) {
      return InvalidArgumentError("state directory " + d +
                                  " is listed twice; give each drive once");
    }
  }
  if (o.block_size_bytes < kDirectIoAlignment || o.block_size_bytes % kDirectIoAlignment != 0 ||
      o.block_size_bytes > (256u << 20)) {
    return InvalidArgumentError("block size " + std::to_string(o.block_size_bytes) +
                                " bytes is not a multiple of 4096 between 4 KiB and 256 MiB");
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    return InvalidArgumentError("queue depth " + std::to_string(o.queue_depth) +
                                " is out of range; use 1..4096");
  }
  if (o.num_rings < 1 || o.num_rings > 64) {
    return InvalidArgumentError("number of rings " + std::to_string(o.num_rings) +
                                " is out of range; use 1..64");
  }
  return Status::Ok();
}

}  // namespace

void TicketState::OnBlockDone(BlockOp& block, Status status) {
  if (!status.ok()) {
    status = status.WithContext(BlockContext(store->tensors_[tensor].spec, block.tensor_block,
                                             block_size_bytes, block.valid_bytes));
  }
  if (kind == IoOpKind::kRead) {
    std::lock_guard<std::mutex> lock(store->mu_);
    auto& d = *store->dirs_[block.dir];
    if (--d.readers[block.physical] == 0 && d.free_when_unread[block.physical]) {
      d.free_when_unread[block.physical] = 0;
      d.free.push_back(block.physical);
      store->free_cv_.notify_all();
    }
  }
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok() && io_error.ok()) io_error = std::move(status);
    block.done = true;
    last = --remaining == 0;
  }
  if (!last) {
    if (kind == IoOpKind::kRead) cv.notify_all();  // a waiter may verify this block now
    return;
  }
  store->FinishTicket(*this);
  {
    std::lock_guard<std::mutex> lock(mu);
    io_done = true;
  }
  cv.notify_all();
}

// Reads are verified by the waiter, not on the ring thread: the ring thread
// then only moves bytes (as fast as the raw loop), and checksumming overlaps
// with the I/O still in flight: of other transfers, and of this one's later
// blocks (each block is verified as soon as it lands, so when the last lands
// only its own checksum is left).
Status TicketState::WaitAndVerify() {
  uint64_t bad = UINT64_MAX;
  if (kind == IoOpKind::kRead) {
    for (size_t i = 0; i < blocks.size() && bad == UINT64_MAX; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return blocks[i].done; });
        if (!io_error.ok()) break;  // the I/O failed: that is the answer
      }
      if (Crc32c(0, blocks[i].request.buffer, blocks[i].valid_bytes) != blocks[i].crc) bad = i;
    }
  }
  {
    // Whatever was found, the caller may reuse the buffer only when all of it landed.
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return io_done; });
    if (!io_error.ok()) return io_error;
  }
  if (bad == UINT64_MAX) return Status::Ok();
  const BlockOp& b = blocks[bad];
  uint32_t crc = Crc32c(0, b.request.buffer, b.valid_bytes);
  checksum_mismatches->fetch_add(1);
  uint64_t begin = b.tensor_block * block_size_bytes;
  return DataLossError("tensor '" + tensor_name + "' block " + std::to_string(b.tensor_block) +
                       " (bytes [" + std::to_string(begin) + ", " +
                       std::to_string(begin + b.valid_bytes) + ")): checksum mismatch reading " +
                       paths[b.dir] + " at offset " + std::to_string(b.request.offset_bytes) +
                       " (stored CRC32C " + std::to_string(b.crc) + ", data gives " +
                       std::to_string(crc) + "); the data on the drive is corrupt");
}

void StateStore::ReleaseBlockLocked(Directory& d, uint32_t physical) {
  if (d.readers[physical] > 0) {
    d.free_when_unread[physical] = 1;  // a read still uses it: free when that ends
  } else {
    d.free.push_back(physical);
  }
}

void StateStore::FinishTicket(TicketState& t) {
  if (t.kind != IoOpKind::kWrite) return;
  bool ok;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    ok = t.io_error.ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const BlockOp& b : t.blocks) {
    Directory& d = *dirs_[b.dir];
    if (ok) {
      uint32_t old = d.physical[b.local_block];
      d.physical[b.local_block] = b.physical;
      d.crc[b.local_block] = b.crc;
      if (old != kUnmappedBlock) ReleaseBlockLocked(d, old);
    } else {
      d.free.push_back(b.physical);  // the old copy stays mapped
    }
  }
  if (!ok) ++num_rolled_back_;
  free_cv_.notify_all();
}

StatusOr<TensorId> StateStore::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) {
    return NotFoundError("no tensor '" + std::string(name) + "' in swap set " + run_id_);
  }
  return it->second;
}

Status StateStore::CheckRange(TensorId id, const void* buffer, uint64_t offset_bytes,
                              uint64_t num_bytes) const {
  if (id >= tensors_.size()) {
    return InvalidArgumentError("tensor id " + std::to_string(id) +
                                " is out of range (the store has " +
                                std::to_string(tensors_.size()) + " tensors)");
  }
  const TensorSpec& t = tensors_[id].spec;
  uint64_t end = offset_bytes + num_bytes;
  if (num_bytes == 0 || end > t.num_bytes || end < offset_bytes) {
    return InvalidArgumentError("bytes [" + std::to_string(offset_bytes) + ", " +
                                std::to_string(end) + ") are outside tensor '" + t.name + "' (" +
                                std::to_string(t.num_bytes) + " bytes) or empty");
  }
  if (offset_bytes % block_size_bytes_ != 0 ||
      (end % block_size_bytes_ != 0 && end != t.num_bytes)) {
    return InvalidArgumentError("bytes [" + std::to_string(offset_bytes) + ", " +
                                std::to_string(end) + ") of tensor '" + t.name +
                                "' do not start and end on " + std::to_string(block_size_bytes_) +
                                "-byte block boundaries (or the tensor's end)");
  }
  if (options_.io_mode == IoMode::kDirect &&
      reinterpret_cast<uintptr_t>(buffer) % kDirectIoAlignment != 0) {
    return InvalidArgumentError("buffer for tensor '" + t.name +
                                "' is not 4096-byte aligned, which O_DIRECT needs; use pinned or "
                                "page-aligned memory");
  }
  if (buffer == nullptr) return InvalidArgumentError("null buffer for tensor '" + t.name + "'");
  return Status::Ok();
}

std::shared_ptr<TicketState> StateStore::NewTicket(TensorId id, IoOpKind kind,
                                                   uint64_t num_blocks) {
  auto ticket = std::make_shared<TicketState>();
  ticket->store = this;
  ticket->tensor = id;
  ticket->kind = kind;
  ticket->block_size_bytes = block_size_bytes_;
  ticket->blocks.resize(num_blocks);
  ticket->tensor_name = tensors_[id].spec.name;
  ticket->paths = paths_;
  ticket->checksum_mismatches = checksum_mismatches_;
  ticket->remaining = num_blocks;
  return ticket;
}

std::shared_ptr<TicketState> TicketState::ForRange(StateStore& store, TensorId id, IoOpKind kind,
                                                   uint64_t offset_bytes, uint64_t num_bytes) {
  const StateStore::TensorState& ts = store.tensors_[id];
  const uint32_t num_dirs = static_cast<uint32_t>(store.dirs_.size());
  const uint32_t bs = store.block_size_bytes_;
  const uint64_t first = offset_bytes / bs;
  auto ticket = store.NewTicket(id, kind, (num_bytes + bs - 1) / bs);
  for (uint64_t i = 0; i < ticket->blocks.size(); ++i) {
    const uint64_t k = first + i;
    BlockOp& b = ticket->blocks[i];
    b.tensor_block = k;
    b.dir = BlockDirectory(ts.start_dir, k, num_dirs);
    b.local_block = ts.first_local_block[b.dir] + k / num_dirs;
    b.valid_bytes = static_cast<uint32_t>(std::min<uint64_t>(bs, ts.spec.num_bytes - k * bs));
  }
  return ticket;
}

void TicketState::PrepareRequest(BlockOp& b, uint8_t* buffer, uint64_t data_offset_bytes,
                                 const std::shared_ptr<TicketState>& self) {
  b.request.kind = kind;
  b.request.file = b.dir;
  b.request.buffer = buffer;
  b.request.num_bytes = static_cast<uint32_t>(RoundUp(b.valid_bytes, kDirectIoAlignment));
  b.request.offset_bytes = data_offset_bytes + uint64_t{b.physical} * block_size_bytes;
  TicketState* t = this;
  b.request.on_done = [keep = self, t, &b](Status s) { t->OnBlockDone(b, std::move(s)); };
}

StatusOr<IoTicket> StateStore::ReadAsync(TensorId id, void* dst, uint64_t offset_bytes,
                                         uint64_t num_bytes) {
  TF_RETURN_IF_ERROR(CheckRange(id, dst, offset_bytes, num_bytes));
  auto ticket = TicketState::ForRange(*this, id, IoOpKind::kRead, offset_bytes, num_bytes);
  const uint64_t count = ticket->blocks.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return FailedPreconditionError("swap set " + run_id_ + " is closed");
    for (uint64_t i = 0; i < count; ++i) {
      BlockOp& b = ticket->blocks[i];
      Directory& d = *dirs_[b.dir];
      uint32_t p = d.physical[b.local_block];
      if (p == kUnmappedBlock) {
        for (uint64_t j = 0; j < i; ++j) {  // undo the reader counts taken so far
          BlockOp& u = ticket->blocks[j];
          Directory& ud = *dirs_[u.dir];
          if (--ud.readers[u.physical] == 0 && ud.free_when_unread[u.physical]) {
            ud.free_when_unread[u.physical] = 0;
            ud.free.push_back(u.physical);
            free_cv_.notify_all();
          }
        }
        return FailedPreconditionError(
            BlockContext(tensors_[id].spec, b.tensor_block, block_size_bytes_, b.valid_bytes) +
            " was never written; write the tensor before reading it");
      }
      b.physical = p;
      b.crc = d.crc[b.local_block];
      ++d.readers[p];
    }
    ++num_reads_;
  }
  for (uint64_t i = 0; i < count; ++i) {
    BlockOp& b = ticket->blocks[i];
    ticket->PrepareRequest(b, static_cast<uint8_t*>(dst) + i * block_size_bytes_,
                           dirs_[b.dir]->header.data_offset_bytes, ticket);
  }
  std::vector<IoRequest*> requests;
  requests.reserve(count);
  for (BlockOp& b : ticket->blocks) requests.push_back(&b.request);
  engine_->Submit(requests);
  return IoTicket(ticket);
}

StatusOr<IoTicket> StateStore::WriteAsync(TensorId id, const void* src, uint64_t offset_bytes,
                                          uint64_t num_bytes) {
  TF_RETURN_IF_ERROR(CheckRange(id, src, offset_bytes, num_bytes));
  const TensorState& ts = tensors_[id];
  const uint32_t num_dirs = static_cast<uint32_t>(dirs_.size());
  auto ticket = TicketState::ForRange(*this, id, IoOpKind::kWrite, offset_bytes, num_bytes);
  const uint64_t count = ticket->blocks.size();
  std::vector<uint64_t> need(num_dirs, 0);
  for (const BlockOp& b : ticket->blocks) ++need[b.dir];
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return FailedPreconditionError("swap set " + run_id_ + " is closed");
    for (uint32_t d = 0; d < num_dirs; ++d) {
      // A rewrite holds old and new blocks until it commits; more than the
      // spare could never get its blocks.
      uint64_t rewrites = 0;
      for (const BlockOp& b : ticket->blocks) {
        if (b.dir == d && dirs_[d]->physical[b.local_block] != kUnmappedBlock) ++rewrites;
      }
      if (rewrites > dirs_[d]->spare_blocks) {
        return InvalidArgumentError(
            "write of " + FormatBytes(num_bytes) + " to tensor '" + ts.spec.name + "' rewrites " +
            std::to_string(rewrites) + " blocks in " + dirs_[d]->dir + ", more than its " +
            std::to_string(dirs_[d]->spare_blocks) +
            " spare blocks; split the write or raise spare_bytes_per_directory");
      }
    }
    free_cv_.wait(lock, [&] {
      for (uint32_t d = 0; d < num_dirs; ++d) {
        if (dirs_[d]->free.size() < need[d]) return false;
      }
      return true;
    });
    for (BlockOp& b : ticket->blocks) {
      Directory& d = *dirs_[b.dir];
      b.physical = d.free.front();
      d.free.pop_front();
    }
    ++num_writes_;
  }
  // Checksum each block just before submitting it, in small batches, so the
  // drive starts on the first blocks while later ones are still being
  // checksummed. (One thread: spreading this over a thread pool bought
  // nothing on the shared machines measured, see bench nvme.)
  IoRequest* requests[kBlocksPerBatch];
  size_t num_requests = 0;
  uint64_t batch_bytes = 0;
  for (uint64_t i = 0; i < count; ++i) {
    BlockOp& b = ticket->blocks[i];
    uint8_t* block_src =
        const_cast<uint8_t*>(static_cast<const uint8_t*>(src)) + i * block_size_bytes_;
    // The checksum covers the tensor's bytes only, not the padding to 4096.
    b.crc = Crc32c(0, block_src, b.valid_bytes);
    ticket->PrepareRequest(b, block_src, dirs_[b.dir]->header.data_offset_bytes, ticket);
    requests[num_requests++] = &b.request;
    batch_bytes += b.request.num_bytes;
    if (num_requests == kBlocksPerBatch || batch_bytes >= kBytesPerBatch || i + 1 == count) {
      engine_->Submit(std::span<IoRequest* const>(requests, num_requests));
      num_requests = 0;
      batch_bytes = 0;
    }
  }
  return IoTicket(ticket);
}

Status StateStore::Read(TensorId id, void* dst) {
  if (id >= tensors_.size()) return CheckRange(id, dst, 0, 1);
  TF_ASSIGN_OR_RETURN(IoTicket t, ReadAsync(id, dst, 0, tensors_[id].spec.num_bytes));
  return t.Wait();
}

Status StateStore::Write(TensorId id, const void* src) {
  if (id >= tensors_.size()) return CheckRange(id, src, 0, 1);
  TF_ASSIGN_OR_RETURN(IoTicket t, WriteAsync(id, src, 0, tensors_[id].spec.num_bytes));
  return t.Wait();
}

Status StateStore::RegisterBuffers(std::vector<iovec> buffers) {
  if (!engine_) return FailedPreconditionError("swap set " + run_id_ + " is closed");
  return engine_->RegisterBuffers(std::move(buffers));
}

Status StateStore::WriteBlockTable(Directory& d, const BlockTable& table) {
  TF_ASSIGN_OR_RETURN(AlignedBuffer buf,
                      AlignedBuffer::Allocate(d.header.block_table_copy_num_bytes));
  EncodeBlockTable(table, std::span<uint8_t>(buf.data(), d.header.block_table_copy_num_bytes));
  uint64_t offset = d.header.block_table_offset_bytes +
                    (table.sequence % 2) * d.header.block_table_copy_num_bytes;
  // Data first, then the table that points at it.
  TF_RETURN_IF_ERROR(Fdatasync(d.fd, d.path));
  TF_RETURN_IF_ERROR(
      PwriteAll(d.fd, buf.data(), d.header.block_table_copy_num_bytes, offset, d.path));
  return Fdatasync(d.fd, d.path);
}

Status StateStore::Sync() {
  std::lock_guard<std::mutex> sync_lock(sync_mu_);
  for (auto& dp : dirs_) {
    Directory& d = *dp;
    BlockTable table;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return FailedPreconditionError("swap set " + run_id_ + " is closed");
      table.sequence = ++d.table_sequence;
      table.physical = d.physical;
      table.crc = d.crc;
    }
    TF_RETURN_IF_ERROR(WriteBlockTable(d, table));
  }
  return Status::Ok();
}

Status StateStore::CloseInternal(bool keep_files) {
  std::lock_guard<std::mutex> sync_lock(sync_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::Ok();
  }
  if (engine_) {
    engine_->Drain();
    engine_.reset();
  }
  Status first_error;
  auto keep_error = [&first_error](Status s) {
    if (!s.ok() && first_error.ok()) first_error = std::move(s);
  };
  for (auto& dp : dirs_) {
    Directory& d = *dp;
    if (keep_files && d.fd >= 0) {
      BlockTable table;
      {
        std::lock_guard<std::mutex> lock(mu_);
        table.sequence = ++d.table_sequence;
        table.physical = d.physical;
        table.crc = d.crc;
      }
      keep_error(WriteBlockTable(d, table));
    }
    if (d.fd >= 0 && close(d.fd) != 0) keep_error(ErrnoStatus(errno, "close " + d.path));
    d.fd = -1;
    if (!keep_files) keep_error(RemoveRunDirectory(d.dir, run_id_));
    d.lock.Release();
  }
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  return first_error;
}

Status StateStore::Close() { return CloseInternal(/*keep_files=*/false); }
Status StateStore::CloseKeepingFiles() { return CloseInternal(/*keep_files=*/true); }

StateStore::~StateStore() { (void)Close(); }

std::vector<std::string> StateStore::swap_file_paths() const {
  std::vector<std::string> paths;
  for (const auto& d : dirs_) paths.push_back(d->path);
  return paths;
}

StateStoreStats StateStore::stats() const {
  StateStoreStats s;
  if (engine_) s.engine = engine_->stats();
  s.io_mode = options_.io_mode;
  s.crc32c_hardware = Crc32cHardwareAvailable();
  for (const TensorState& t : tensors_) s.data_bytes += t.spec.num_bytes;
  for (const auto& d : dirs_) {
    s.file_bytes += d->header.data_offset_bytes + d->header.num_physical_blocks * block_size_bytes_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.num_reads = num_reads_;
  s.num_writes = num_writes_;
  s.num_failed_writes_rolled_back = num_rolled_back_;
  s.num_checksum_mismatches = checksum_mismatches_->load();
  return s;
}

Status StateStore::InitEngine() {
  IoEngineOptions eo;
  eo.num_rings = options_.num_rings;
  eo.queue_depth = options_.queue_depth;
  eo.register_files = options_.register_files;
  eo.backend_factory = options_.backend_factory;
  std::vector<IoFile> files;
  paths_.clear();
  for (const auto& d : dirs_) {
    files.push_back({d->fd, d->path});
    paths_.push_back(d->path);
  }
  TF_ASSIGN_OR_RETURN(engine_, IoEngine::Create(eo, std::move(files)));
  return Status::Ok();
}

namespace {

// The tensors of a new set, in order: each named (at most 4096 bytes),
// not empty, its name unique.
Status CheckTensorSpecs(const std::vector<TensorSpec>& tensors) {
  std::unordered_set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = tensors[i];
    if (spec.name.empty() || spec.name.size() > 4096) {
      return InvalidArgumentError("tensor " + std::to_string(i) +
                                  " has an empty or over-long name");
    }
    if (spec.num_bytes == 0) return InvalidArgumentError("tensor '" + spec.name + "' has 0 bytes");
    if (!names.insert(spec.name).second) {
      return InvalidArgumentError("tensor name '" + spec.name +
                                  "' appears twice; names must be unique");
    }
  }
  return Status::Ok();
}

// Makes DIR/tierflow-swap/RUN for a new set: refused where DIR is missing,
// holds a stale set, or already has the run.
Status MakeRunDirectory(const std::string& dir, const std::string& run_id) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFoundError("state directory " + dir + " does not exist or is not a directory");
  }
  TF_RETURN_IF_ERROR(CheckNoStaleSwapSets(dir));
  fs::create_directories(fs::path(dir) / kSwapRootName, ec);
  if (ec)
    return ErrnoStatus(ec.value(), "create directory " + (fs::path(dir) / kSwapRootName).string());
  std::string run_dir = RunDirectory(dir, run_id);
  if (mkdir(run_dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      return FailedPreconditionError("swap set " + run_dir +
                                     " already exists; choose another run id");
    }
    return ErrnoStatus(errno, "create directory " + run_dir);
  }
  return Status::Ok();
}

// A new swap file's layout after its header `h` (block tables, then the
// data from a block-aligned offset), its space reserved (a full drive is an
// error at start, not mid-run), and the header written.
Status WriteNewSwapFile(int fd, const std::string& path, SwapFileHeader& h) {
  const uint32_t bs = h.block_size_bytes;
  h.block_table_copy_num_bytes = BlockTableCopySize(h.num_logical_blocks);
  // Offsets do not change the header's size (fixed-width fields).
  uint64_t header_bytes = EncodeSwapHeader(h).size();
  h.block_table_offset_bytes = header_bytes;
  h.data_offset_bytes =
      RoundUp(header_bytes + 2 * h.block_table_copy_num_bytes, std::min<uint64_t>(bs, 1u << 20));
  uint64_t file_bytes = h.data_offset_bytes + h.num_physical_blocks * bs;
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(file_bytes));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (ftruncate(fd, static_cast<off_t>(file_bytes)) != 0)
      rc = errno;
    else
      rc = 0;
  }
  if (rc != 0) {
    return ErrnoStatus(rc, "reserve " + FormatBytes(file_bytes) + " for swap file " + path);
  }
  std::vector<uint8_t> encoded = EncodeSwapHeader(h);
  TF_ASSIGN_OR_RETURN(AlignedBuffer hb, AlignedBuffer::Allocate(encoded.size()));
  std::copy(encoded.begin(), encoded.end(), hb.data());
  return PwriteAll(fd, hb.data(), encoded.size(), 0, path);
}

// After a failed Create or Open: closes the swap files opened so far.
template <typename Directories>
void CloseSwapFiles(Directories& dirs) {
  for (auto& d : dirs) {
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
  }
}

}  // namespace

StatusOr<std::unique_ptr<StateStore>> StateStore::Create(const StateStoreOptions& options,
                                                         const std::vector<TensorSpec>& tensors) {
  TF_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<StateStore> store(new StateStore());
  store->options_ = options;
  store->run_id_ = options.run_id.empty() ? MakeRunId() : options.run_id;
  TF_RETURN_IF_ERROR(ValidateRunId(store->run_id_));
  store->block_size_bytes_ = options.block_size_bytes;
  const uint32_t num_dirs = static_cast<uint32_t>(options.directories.size());
  const uint32_t bs = options.block_size_bytes;

  // Layout: tensor i starts in directory i % num_dirs, so small tensors spread too.
  TF_RETURN_IF_ERROR(CheckTensorSpecs(tensors));
  std::vector<uint64_t> logical_blocks(num_dirs, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = tensors[i];
    store->by_name_.emplace(spec.name, static_cast<TensorId>(i));
    TensorState ts;
    ts.spec = spec;
    ts.start_dir = static_cast<uint32_t>(i % num_dirs);
    ts.num_blocks = (spec.num_bytes + bs - 1) / bs;
    for (uint32_t d = 0; d < num_dirs; ++d) {
      ts.first_local_block.push_back(logical_blocks[d]);
      logical_blocks[d] += BlocksInDirectory(ts.num_blocks, ts.start_dir, d, num_dirs);
    }
    store->tensors_.push_back(std::move(ts));
  }

  // From here on, a failure removes whatever was created.
  struct Cleanup {
    StateStore* store;
    std::vector<std::string> created;
    bool armed = true;
    ~Cleanup() {
      if (!armed) return;
      CloseSwapFiles(store->dirs_);
      for (const std::string& dir : created) (void)RemoveRunDirectory(dir, store->run_id_);
      store->closed_ = true;
    }
  } cleanup{store.get(), {}};

  for (uint32_t d = 0; d < num_dirs; ++d) {
    const std::string& dir = options.directories[d];
    TF_RETURN_IF_ERROR(MakeRunDirectory(dir, store->run_id_));
    cleanup.created.push_back(dir);
    auto dir_state = std::make_unique<Directory>();
    dir_state->dir = dir;
    dir_state->path = SwapFilePath(dir, store->run_id_, d);
    TF_ASSIGN_OR_RETURN(dir_state->lock,
                        RunLock::Acquire(RunDirectory(dir, store->run_id_), /*fresh=*/true));
    if (!options.owner.empty())
      TF_RETURN_IF_ERROR(WriteSwapSetOwner(dir, store->run_id_, options.owner));
    store->dirs_.push_back(std::move(dir_state));
    Directory& ds = *store->dirs_.back();
    TF_ASSIGN_OR_RETURN(ds.fd, OpenSwapFile(ds.path, options.io_mode, /*create=*/true));

    SwapFileHeader& h = ds.header;
    h.run_id = store->run_id_;
    h.dir_index = d;
    h.num_dirs = num_dirs;
    h.block_size_bytes = bs;
    h.num_logical_blocks = logical_blocks[d];
    ds.spare_blocks = std::max<uint64_t>(1, (options.spare_bytes_per_directory + bs - 1) / bs);
    h.num_physical_blocks = h.num_logical_blocks + ds.spare_blocks;
    if (h.num_physical_blocks >= kUnmappedBlock) {
      return InvalidArgumentError("too many blocks for one directory; raise the block size");
    }
    for (uint32_t t = 0; t < store->tensors_.size(); ++t) {
      const TensorState& ts = store->tensors_[t];
      h.tensors.push_back({ts.spec.name, ts.spec.dtype, ts.spec.num_bytes, ts.num_blocks,
                           ts.start_dir, ts.first_local_block[d]});
    }
    TF_RETURN_IF_ERROR(WriteNewSwapFile(ds.fd, ds.path, h));

    ds.physical.assign(h.num_logical_blocks, kUnmappedBlock);
    ds.crc.assign(h.num_logical_blocks, 0);
    for (uint32_t p = 0; p < h.num_physical_blocks; ++p) ds.free.push_back(p);
    ds.readers.assign(h.num_physical_blocks, 0);
    ds.free_when_unread.assign(h.num_physical_blocks, 0);
    BlockTable table{++ds.table_sequence, ds.physical, ds.crc};
    TF_RETURN_IF_ERROR(store->WriteBlockTable(ds, table));
  }
  TF_RETURN_IF_ERROR(store->InitEngine());
  cleanup.armed = false;
  return store;
}

StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const StateStoreOptions& options) {
  TF_RETURN_IF_ERROR(ValidateOptions(options));
  TF_RETURN_IF_ERROR(ValidateRunId(options.run_id));
  std::unique_ptr<StateStore> store(new StateStore());
  store->options_ = options;
  store->run_id_ = options.run_id;
  const uint32_t num_dirs = static_cast<uint32_t>(options.directories.size());
  struct CloseFds {
    StateStore* store;
    bool armed = true;
    ~CloseFds() {
      if (!armed) return;
      CloseSwapFiles(store->dirs_);
      store->closed_ = true;  // the files stay: they are not ours to remove
    }
  } guard{store.get()};

  for (uint32_t d = 0; d < num_dirs; ++d) {
    const std::string& dir = options.directories[d];
    std::string run_dir = RunDirectory(dir, options.run_id);
    std::error_code ec;
    if (!fs::is_directory(run_dir, ec)) {
      return NotFoundError("swap set " + run_dir + " does not exist (directory " +
                           std::to_string(d) + " of run " + options.run_id + ")");
    }
    auto ds_owned = std::make_unique<Directory>();
    Directory& ds = *ds_owned;
    store->dirs_.push_back(std::move(ds_owned));
    ds.dir = dir;
    ds.path = SwapFilePath(dir, options.run_id, d);
    TF_ASSIGN_OR_RETURN(ds.lock, RunLock::Acquire(run_dir));
    TF_ASSIGN_OR_RETURN(ds.fd, OpenSwapFile(ds.path, options.io_mode, /*create=*/false));

    // The one decoding path shared with the read-only readers: header, the
    // newer valid block table, and a block map with no invalid or shared block.
    TF_ASSIGN_OR_RETURN(SwapFileMetadata meta, ReadSwapFileMetadata(ds.fd, ds.path));
    ds.header = std::move(meta.header);
    const SwapFileHeader& h = ds.header;
    TF_RETURN_IF_ERROR(CheckSwapSetMember(h, ds.path, options.run_id, d, num_dirs,
                                          d == 0 ? nullptr : &store->dirs_[0]->header,
                                          store->dirs_[0]->path));
    if (d == 0) {
      store->block_size_bytes_ = h.block_size_bytes;
      for (uint32_t t = 0; t < h.tensors.size(); ++t) {
        const SwapTensorEntry& e = h.tensors[t];
        TensorState ts;
        ts.spec = {e.name, e.dtype, e.num_bytes};
        ts.start_dir = e.start_dir;
        ts.num_blocks = e.num_blocks;
        store->by_name_.emplace(e.name, t);  // names are unique: ReadSwapFileMetadata checked
        store->tensors_.push_back(std::move(ts));
      }
    }
    for (uint32_t t = 0; t < h.tensors.size(); ++t) {
      store->tensors_[t].first_local_block.push_back(h.tensors[t].first_local_block);
    }
    // Free blocks: those no logical block maps (each mapped one is in range
    // and mapped once, ReadSwapFileMetadata checked).
    std::vector<uint8_t> used(h.num_physical_blocks, 0);
    for (uint32_t p : meta.table.physical) {
      if (p != kUnmappedBlock) used[p] = 1;
    }
    ds.physical = std::move(meta.table.physical);
    ds.crc = std::move(meta.table.crc);
    ds.table_sequence = meta.table.sequence;
    for (uint32_t p = 0; p < h.num_physical_blocks; ++p) {
      if (!used[p]) ds.free.push_back(p);
    }
    ds.spare_blocks = h.num_physical_blocks - h.num_logical_blocks;
    ds.readers.assign(h.num_physical_blocks, 0);
    ds.free_when_unread.assign(h.num_physical_blocks, 0);
  }
  store->options_.block_size_bytes = store->block_size_bytes_;
  TF_RETURN_IF_ERROR(store->InitEngine());
  guard.armed = false;
  return store;
}

}  // namespace tierflow::offload

// StateStore: named tensors (fp32 master weights, Adam moments, ...) kept in
// swap files on one or more NVMe drives, read and written asynchronously
// through the io_uring engine.
//
// Each tensor is cut into fixed-size blocks striped round-robin over the
// directories (one swap file per directory). Every block carries a CRC32C,
// computed on write and verified on read. Writes never overwrite the block
// they replace: each goes to a free block and the map switches only when the
// whole write has succeeded, so a failed or torn write leaves the previous
// copy readable and verified (the "spare" blocks make room for this).
//
// Typical use (several reads ahead, several writes behind):
//   auto store = StateStore::Create(options, tensors);
//   IoTicket r = store->ReadAsync(id, buf, 0, n).value();   // read ahead
//   ... r.Wait() ... compute ...
//   IoTicket w = store->WriteAsync(id, buf, 0, n).value();  // write behind
//   ... later w.Wait() before reusing buf ...
//   store->Close();   // removes the swap files
//
// Thread safety: all methods may be called from any thread. Concurrent
// writes to the same blocks complete in an unspecified order.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "offload/io_engine.h"
#include "offload/swap_format.h"
#include "offload/swap_set.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow::offload {

struct StateStoreOptions {
  // One directory per drive; data is striped across them. REQUIRES: non-empty.
  std::vector<std::string> directories;
  // Names the swap set (DIR/tierflow-swap/RUN_ID). Default (empty): MakeRunId().
  std::string run_id;
  // Bytes per block: the unit of I/O and of checksums. A multiple of 4096
  // from 4 KiB to 256 MiB. Default: 1 MiB.
  uint32_t block_size_bytes = 1u << 20;
  // kDirect (O_DIRECT) or kBuffered (page cache; only when chosen). Default: kDirect.
  IoMode io_mode = IoMode::kDirect;
  // Operations in flight per ring. Default: 32.
  uint32_t queue_depth = 32;
  // io_uring rings, each with its own thread. Default: 1.
  uint32_t num_rings = 1;
  // Register the swap files with the rings. Default: true.
  bool register_files = true;
  // Extra blocks per directory for write-to-new-block: bounds how many blocks
  // can be rewritten at once (one WriteAsync may rewrite at most this much
  // per directory; more in flight waits). Default: 256 MiB.
  uint64_t spare_bytes_per_directory = 256ull << 20;
  // Who makes the set: written to DIR/tierflow-swap/RUN_ID/owner in every
  // directory as the set is created (offload/swap_set.h), and read by the
  // rule that decides who may remove a stale set
  // (checkpoint/swap_set_owner.h). Default (empty): no owner record, so only
  // `tierflow tier clean` removes the set once stale.
  std::string owner;
  // Makes the ring backends; tests inject faults here. Default: io_uring.
  IoBackendFactory backend_factory;
};

struct TensorSpec {
  std::string name;  // unique, e.g. "layers.3.mlp.up/exp_avg"
  DType dtype = DType::kF32;
  uint64_t num_bytes = 0;
};

using TensorId = uint32_t;

namespace internal {
struct TicketState;
}

// Something to wait on: one ReadAsync or WriteAsync. Movable, cheap. A
// default-constructed ticket is already done (OK).
class IoTicket {
 public:
  IoTicket() = default;
  explicit IoTicket(std::shared_ptr<internal::TicketState> state) : state_(std::move(state)) {}
  // Blocks until every block of the transfer has completed, then (for reads)
  // verifies every block's CRC32C on the calling thread; returns OK or the
  // first error (naming tensor, block, path and offset). May be called again
  // and from several threads; the check runs once. Valid after the store closed.
  Status Wait() const;
  // True once the I/O has completed (Wait() then only verifies checksums).
  bool done() const;

 private:
  std::shared_ptr<internal::TicketState> state_;
};

struct StateStoreStats {
  IoEngineStats engine;
  IoMode io_mode = IoMode::kDirect;
  bool crc32c_hardware = false;
  uint64_t num_reads = 0, num_writes = 0;  // tickets
  uint64_t num_failed_writes_rolled_back = 0;
  uint64_t num_checksum_mismatches = 0;
  uint64_t data_bytes = 0;  // tensor bytes stored
  uint64_t file_bytes = 0;  // all swap files, with headers and spare blocks
};

class StateStore {
 public:
  // Creates a new swap set for `tensors` under every directory and opens it.
  // Errors: InvalidArgument (options, duplicate names); FailedPrecondition
  // when a directory holds a stale set (named, with how to clean it) or the
  // run id is taken; Unavailable when a file system lacks O_DIRECT (with the
  // --nvme-buffered hint); ResourceExhausted when a drive lacks the space.
  // Nothing is left on disk after an error.
  static StatusOr<std::unique_ptr<StateStore>> Create(const StateStoreOptions& options,
                                                      const std::vector<TensorSpec>& tensors);

  // Opens the existing set options.run_id (kept by CloseKeepingFiles or left
  // by a crash) and takes it over: its data as of its last Sync() is
  // readable, and Close() removes it. Errors: NotFound naming a missing file;
  // DataLoss naming the file when a header or both block tables are corrupt;
  // FailedPrecondition when a live run holds it.
  static StatusOr<std::unique_ptr<StateStore>> Open(const StateStoreOptions& options);

  // Close(): waits for in-flight I/O and removes the swap files; errors are dropped.
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  size_t num_tensors() const { return tensors_.size(); }
  const TensorSpec& tensor(TensorId id) const { return tensors_[id].spec; }
  // NotFound naming the tensor when there is none by that name.
  StatusOr<TensorId> Find(std::string_view name) const;

  // Reads bytes [offset_bytes, offset_bytes + num_bytes) of tensor `id` into `dst`.
  // REQUIRES: offset_bytes is a multiple of the block size; the range ends at
  // a block boundary or at the tensor's end; in direct mode `dst` is
  // 4096-aligned; `dst` has RoundUp(num_bytes, 4096) writable bytes (the
  // bytes past num_bytes are overwritten); `dst` stays valid until the ticket
  // is done. Errors at once: InvalidArgument (range, alignment),
  // FailedPrecondition (never-written blocks, store closed). Errors on Wait:
  // DataLoss on a checksum mismatch; I/O errors; all name tensor, path, offset.
  StatusOr<IoTicket> ReadAsync(TensorId id, void* dst, uint64_t offset_bytes, uint64_t num_bytes);

  // Writes `src` into the same kind of range. The previous contents of the
  // range stay readable until the whole write succeeded; on failure they
  // remain the tensor's contents. May block while all spare blocks are taken
  // by earlier writes still in flight. REQUIRES: as ReadAsync, and `src` is
  // not modified until the ticket is done. Errors at once: InvalidArgument,
  // including a rewrite larger than the spare blocks of a directory.
  StatusOr<IoTicket> WriteAsync(TensorId id, const void* src, uint64_t offset_bytes,
                                uint64_t num_bytes);

  // Whole-tensor synchronous forms.
  Status Read(TensorId id, void* dst);
  Status Write(TensorId id, const void* src);

  // Registers caller buffers (e.g. pinned staging buffers) as io_uring fixed
  // buffers; later transfers inside them use them. When the memlock limit
  // refuses, the store keeps working without and the reason is returned and
  // kept in stats().engine.fixed_buffers_reason. Waits for in-flight I/O.
  Status RegisterBuffers(std::vector<iovec> buffers);

  // Makes the committed block map durable (alternating table copies, after
  // an fdatasync of the data) so Open() can read this state after a crash or
  // CloseKeepingFiles(). Blocks rewritten after a Sync may reuse blocks the
  // synced map refers to: a crash then shows as DataLoss (checksums), never
  // as silently wrong data. Sync at the point you mean to reopen from.
  Status Sync();

  // Waits for in-flight I/O, removes the swap files, the lock and the run
  // directories. Idempotent.
  Status Close();

  // Waits for in-flight I/O, Sync()s and closes, leaving the files on disk:
  // the set becomes stale until Open() takes it over or `tier clean` removes it.
  Status CloseKeepingFiles();

  const std::string& run_id() const { return run_id_; }
  uint32_t block_size_bytes() const { return block_size_bytes_; }
  std::vector<std::string> swap_file_paths() const;
  StateStoreStats stats() const;

 private:
  friend struct internal::TicketState;
  struct Directory;
  struct TensorState {
    TensorSpec spec;
    uint32_t start_dir = 0;
    uint64_t num_blocks = 0;
    std::vector<uint64_t> first_local_block;  // per directory
  };
  StateStore() = default;
  Status CheckRange(TensorId id, const void* buffer, uint64_t offset_bytes,
                    uint64_t num_bytes) const;
  Status InitEngine();
  Status WriteBlockTable(Directory& dir, const BlockTable& table);
  void ReleaseBlockLocked(Directory& dir, uint32_t physical);
  void FinishTicket(internal::TicketState& ticket);
  Status CloseInternal(bool keep_files);
  std::shared_ptr<internal::TicketState> NewTicket(TensorId id, IoOpKind kind, uint64_t num_blocks);

  StateStoreOptions options_;
  std::string run_id_;
  uint32_t block_size_bytes_ = 0;
  std::vector<TensorState> tensors_;
  std::unordered_map<std::string, TensorId> by_name_;
  std::vector<std::unique_ptr<Directory>> dirs_;
  std::unique_ptr<IoEngine> engine_;

  mutable std::mutex mu_;            // guards the block maps and counters below
  std::condition_variable free_cv_;  // a block was freed
  bool closed_ = false;
  uint64_t num_reads_ = 0, num_writes_ = 0, num_rolled_back_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> checksum_mismatches_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::vector<std::string> paths_;  // per directory, for tickets' messages
  std::mutex sync_mu_;              // serialises Sync/Close
};

}  // namespace tierflow::offload

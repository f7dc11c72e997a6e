// Reading swap files: the one place their header and block tables are read
// from disk and checked, and read-only access to their blocks and tensors.
//
// ReadSwapFileMetadata is shared by StateStore::Open (which then takes the
// set over: locks it, rewrites its block table, removes it on Close) and by
// the read-only readers below (inspecting, verifying, exporting, checkpoints),
// which must not take a set over. Both decode a file through it, so a file
// one of them refuses the other refuses too, with the same error.
//
// The readers use plain buffered pread()s, so they also work on a live run's
// files (whose data may be newer than the durable block map: for live sets
// only the header and block tables are meaningful, not the block checksums).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "offload/swap_format.h"
#include "tierflow/status.h"

namespace tierflow::offload {

// A swap file's header and block table as read from disk, every check passed.
struct SwapFileMetadata {
  SwapFileHeader header;
  BlockTable table;         // the newer of the two copies (A/B) that decodes
  uint64_t file_bytes = 0;  // the file's size when it was read
};

// Reads and checks the header and block tables of the swap file open as
// `fd`; `path` names it in errors. `fd` may be opened with O_DIRECT: every
// read is 4096-aligned in buffer, offset and length. Checked: the header
// (DecodeSwapHeader) names no tensor twice; the file is long enough for
// every physical block its header promises; the newer copy of the block
// table that decodes (a torn table write leaves the older one) passes
// CheckBlockMap. A newer copy with a bad map is refused, not skipped for
// the older one: it passed its checksum, so it is what was committed.
// Errors: errno errors naming `path`; DataLoss naming `path` and what is
// wrong; Unimplemented for a newer format version.
StatusOr<SwapFileMetadata> ReadSwapFileMetadata(int fd, const std::string& path);

// Checks that `table` fits `header`: one entry (physical block and CRC) per
// logical block, every mapped logical block on a physical block of the file,
// and no physical block mapped by two logical blocks (writes go to a free
// block and then switch the map, so a shared block would let a write to one
// tensor change another's bytes, and its checksum could never hold for
// both). Errors: DataLoss naming `path` and the first bad logical block.
Status CheckBlockMap(const SwapFileHeader& header, const BlockTable& table, std::string_view path);

// Checks that `header`, read from `path`, is file `dir` of `num_dirs` of run
// `run_id` and, when `first` (file 0 of the set, read from `first_path`) is
// given, that its block size and tensor table (names, sizes, start
// directories) agree with it. Errors: DataLoss saying which file disagrees.
Status CheckSwapSetMember(const SwapFileHeader& header, const std::string& path,
                          const std::string& run_id, uint32_t dir, uint32_t num_dirs,
                          const SwapFileHeader* first, const std::string& first_path);

// One block whose data does not match its checksum (or cannot be read).
struct SwapBlockProblem {
  std::string file;                 // the swap file
  std::string tensor;               // the tensor the block belongs to
  uint64_t tensor_begin_bytes = 0;  // [begin, end) within the tensor
  uint64_t tensor_end_bytes = 0;
  uint64_t file_offset_bytes = 0;  // where the block starts in the file
  std::string what;                // "CRC32C mismatch (stored X, data gives Y)", ...
};

// One swap file, opened read-only: its header and its newest valid block table.
class SwapFileView {
 public:
  // Errors: those of ReadSwapFileMetadata (errno errors naming the path;
  // DataLoss naming the path when the header or both block-table copies are
  // corrupt, the block map is invalid or shares a physical block, or the
  // file is shorter than its header says).
  static StatusOr<std::unique_ptr<SwapFileView>> Open(const std::string& path);
  ~SwapFileView();
  SwapFileView(const SwapFileView&) = delete;
  SwapFileView& operator=(const SwapFileView&) = delete;

  const std::string& path() const { return path_; }
  const SwapFileHeader& header() const { return header_; }
  const BlockTable& table() const { return table_; }
  uint64_t file_bytes() const { return file_bytes_; }
  // Logical blocks ever written (mapped) in this file.
  uint64_t num_blocks_written() const;

  // Reads block `tensor_block` of `tensor` (which must live in this file)
  // into `dst` (block_size bytes), checking its CRC32C. Errors: DataLoss
  // naming file, tensor, byte range and offset; FailedPrecondition when the
  // block was never written.
  Status ReadBlock(const SwapTensorEntry& tensor, uint64_t tensor_block, uint8_t* dst) const;

  // Checks every written block of every tensor in this file. Returns the
  // problems (empty when all verify); counts the blocks checked.
  std::vector<SwapBlockProblem> VerifyBlocks(uint64_t* num_blocks_checked) const;

 private:
  SwapFileView() = default;
  // Where block `tensor_block` of `tensor` is (file offset, valid bytes,
  // stored CRC); false when the block is unmapped.
  bool Locate(const SwapTensorEntry& tensor, uint64_t tensor_block, uint64_t* offset,
              uint32_t* valid_bytes, uint32_t* crc) const;

  int fd_ = -1;
  std::string path_;
  SwapFileHeader header_;
  BlockTable table_;
  uint64_t file_bytes_ = 0;
};

// The swap files of one set (one per directory, in the set's order), read-only.
class SwapSetReader {
 public:
  // Opens DIR/tierflow-swap/RUN_ID/state-I.swap for every directory I.
  // Errors: those of SwapFileView::Open; those of CheckSwapSetMember when
  // the files disagree (another run, another directory order, differing
  // tensor tables); InvalidArgument when no directory is given.
  static StatusOr<std::unique_ptr<SwapSetReader>> Open(const std::vector<std::string>& directories,
                                                       const std::string& run_id);

  const std::vector<SwapTensorEntry>& tensors() const { return files_[0]->header().tensors; }
  // nullptr when there is no tensor by that name.
  const SwapTensorEntry* Find(std::string_view name) const;
  const std::vector<std::unique_ptr<SwapFileView>>& files() const { return files_; }

  // Reads the whole tensor `name` into `dst` (exactly `num_bytes`, which
  // must be its size), verifying every block. Errors: NotFound (no such
  // tensor), InvalidArgument (size differs), DataLoss naming file, tensor,
  // byte range and offset.
  Status Read(std::string_view name, void* dst, uint64_t num_bytes) const;
  // Bytes [byte_offset, byte_offset + num_bytes) of the tensor, verifying
  // every block it touches. Errors: as Read; InvalidArgument for a range
  // outside the tensor.
  Status ReadRange(std::string_view name, uint64_t byte_offset, void* dst,
                   uint64_t num_bytes) const;

 private:
  std::vector<std::unique_ptr<SwapFileView>> files_;
};

}  // namespace tierflow::offload

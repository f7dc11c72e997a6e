// Read-only access to swap files: their header and block map, every block's
// checksum, and whole tensors, without taking a run's lock or writing a byte.
//
// StateStore::Open takes a set over (locks it, rewrites its block table on
// close, removes it on Close); inspecting, verifying and exporting must not.
// These readers decode the on-disk format (offload/swap_format.h) with plain
// buffered pread()s, so they also work on a live run's files (whose data may
// be newer than the durable block map: for live sets only the header and
// block tables are meaningful, not the block checksums).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "offload/swap_format.h"
#include "tierflow/status.h"

namespace tierflow::tier {

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
  // Errors: errno errors naming the path; DataLoss (naming the path) when
  // the header or both block-table copies are corrupt, or the file is
  // shorter than its header says.
  static StatusOr<std::unique_ptr<SwapFileView>> Open(const std::string& path);
  ~SwapFileView();
  SwapFileView(const SwapFileView&) = delete;
  SwapFileView& operator=(const SwapFileView&) = delete;

  const std::string& path() const { return path_; }
  const offload::SwapFileHeader& header() const { return header_; }
  const offload::BlockTable& table() const { return table_; }
  uint64_t file_bytes() const { return file_bytes_; }
  // Logical blocks ever written (mapped) in this file.
  uint64_t num_blocks_written() const;

  // Reads block `tensor_block` of `tensor` (which must live in this file)
  // into `dst` (block_size bytes), checking its CRC32C. Errors: DataLoss
  // naming file, tensor, byte range and offset; FailedPrecondition when the
  // block was never written.
  Status ReadBlock(const offload::SwapTensorEntry& tensor, uint64_t tensor_block,
                   uint8_t* dst) const;

  // Checks every written block of every tensor in this file. Returns the
  // problems (empty when all verify); counts the blocks checked.
  std::vector<SwapBlockProblem> VerifyBlocks(uint64_t* num_blocks_checked) const;

 private:
  SwapFileView() = default;
  // Where block `tensor_block` of `tensor` is: the problem's fields, and
  // returns false (with *problem set) when the block is unmapped.
  bool Locate(const offload::SwapTensorEntry& tensor, uint64_t tensor_block, uint64_t* offset,
              uint32_t* valid_bytes, uint32_t* crc) const;

  int fd_ = -1;
  std::string path_;
  offload::SwapFileHeader header_;
  offload::BlockTable table_;
  uint64_t file_bytes_ = 0;
};

// The swap files of one set (one per directory, in the set's order), read-only.
class SwapSetReader {
 public:
  // Opens DIR/tierflow-swap/RUN_ID/state-I.swap for every directory I.
  // Errors: those of SwapFileView::Open; DataLoss when the files disagree
  // (another run, another directory order, differing tensor tables).
  static StatusOr<std::unique_ptr<SwapSetReader>> Open(const std::vector<std::string>& directories,
                                                       const std::string& run_id);

  const std::vector<offload::SwapTensorEntry>& tensors() const {
    return files_[0]->header().tensors;
  }
  // nullptr when there is no tensor by that name.
  const offload::SwapTensorEntry* Find(std::string_view name) const;
  const std::vector<std::unique_ptr<SwapFileView>>& files() const { return files_; }

  // Reads the whole tensor `name` into `dst` (exactly `num_bytes`, which
  // must be its size), verifying every block. Errors: NotFound (no such
  // tensor), InvalidArgument (size differs), DataLoss naming file, tensor,
  // byte range and offset.
  Status Read(std::string_view name, void* dst, uint64_t num_bytes) const;

 private:
  std::vector<std::unique_ptr<SwapFileView>> files_;
};

}  // namespace tierflow::tier

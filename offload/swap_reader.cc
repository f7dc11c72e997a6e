// Reading swap files: the shared metadata path (header, A/B block tables,
// block map) and read-only block and tensor access.
#include "offload/swap_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <span>

#include "offload/aligned_buffer.h"
#include "offload/crc32c.h"
#include "offload/swap_set.h"

namespace tierflow::offload {
namespace {

// Reads exactly `num_bytes`; a short read means the file ends early.
Status PreadAll(int fd, void* dst, uint64_t num_bytes, uint64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < num_bytes) {
    ssize_t n = ::pread(fd, p + done, num_bytes - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read " + path + " at offset " + std::to_string(offset + done));
    }
    if (n == 0) {
      return DataLossError("swap file " + path + " ends at offset " +
                           std::to_string(offset + done) +
                           " inside data it should hold (truncated)");
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status Truncated(const std::string& path, uint64_t file_bytes, const std::string& need) {
  return DataLossError("swap file " + path + " is " + std::to_string(file_bytes) +
                       " bytes but its header needs " + need + ": it is truncated");
}

}  // namespace

Status CheckBlockMap(const SwapFileHeader& h, const BlockTable& table, std::string_view path) {
  if (table.physical.size() != h.num_logical_blocks || table.crc.size() != h.num_logical_blocks) {
    return DataLossError("swap file " + std::string(path) + ": block table has " +
                         std::to_string(table.physical.size()) + " entries, its header " +
                         std::to_string(h.num_logical_blocks) + " logical blocks");
  }
  std::vector<uint8_t> used(h.num_physical_blocks, 0);
  for (uint64_t l = 0; l < table.physical.size(); ++l) {
    const uint32_t p = table.physical[l];
    if (p == kUnmappedBlock) continue;
    if (p >= h.num_physical_blocks || used[p]) {
      return DataLossError("swap file " + std::string(path) + ": block table maps logical block " +
                           std::to_string(l) + " to invalid or shared physical block " +
                           std::to_string(p));
    }
    used[p] = 1;
  }
  return Status::Ok();
}

StatusOr<SwapFileMetadata> ReadSwapFileMetadata(int fd, const std::string& path) {
  SwapFileMetadata m;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat " + path);
  m.file_bytes = static_cast<uint64_t>(st.st_size);
  if (m.file_bytes < kDirectIoAlignment) {
    return DataLossError("swap file " + path + " is " + std::to_string(m.file_bytes) +
                         " bytes, shorter than a header: it is truncated (an interrupted "
                         "creation?)");
  }
  TF_ASSIGN_OR_RETURN(AlignedBuffer prefix, AlignedBuffer::Allocate(kDirectIoAlignment));
  TF_RETURN_IF_ERROR(PreadAll(fd, prefix.data(), kDirectIoAlignment, 0, path));
  TF_ASSIGN_OR_RETURN(
      uint64_t header_bytes,
      SwapHeaderSize(std::span<const uint8_t>(prefix.data(), kDirectIoAlignment), path));
  if (m.file_bytes < header_bytes)
    return Truncated(path, m.file_bytes, std::to_string(header_bytes));
  TF_ASSIGN_OR_RETURN(AlignedBuffer hb, AlignedBuffer::Allocate(header_bytes));
  TF_RETURN_IF_ERROR(PreadAll(fd, hb.data(), header_bytes, 0, path));
  TF_ASSIGN_OR_RETURN(m.header,
                      DecodeSwapHeader(std::span<const uint8_t>(hb.data(), header_bytes), path));
  const SwapFileHeader& h = m.header;
  // Regions that overlap the header, or are unaligned, would make the
  // store's O_DIRECT table writes fail or overwrite the header.
  if (h.block_table_offset_bytes < header_bytes ||
      h.block_table_offset_bytes % kDirectIoAlignment != 0 ||
      h.data_offset_bytes % kDirectIoAlignment != 0) {
    return DataLossError("swap file " + path + ": block tables at offset " +
                         std::to_string(h.block_table_offset_bytes) + " and data at offset " +
                         std::to_string(h.data_offset_bytes) + " do not fit a " +
                         std::to_string(header_bytes) + "-byte header and 4096-byte alignment");
  }
  std::set<std::string_view> names;
  for (const SwapTensorEntry& t : h.tensors) {
    if (!names.insert(t.name).second) {
      return DataLossError("swap file " + path + " names tensor '" + t.name + "' twice");
    }
  }
  // Before any table is read: the size bounds how much the header may make
  // us allocate. Subtractions, as the sum could wrap for hostile values.
  if (m.file_bytes < h.data_offset_bytes ||
      (m.file_bytes - h.data_offset_bytes) / h.block_size_bytes < h.num_physical_blocks) {
    uint64_t need = 0;
    const bool wraps = __builtin_add_overflow(h.data_offset_bytes,
                                              h.num_physical_blocks * h.block_size_bytes, &need);
    return Truncated(path, m.file_bytes, wraps ? "more than 2^64 bytes" : std::to_string(need));
  }
  // The newer of the two block tables that checks out.
  std::optional<BlockTable> best;
  Status table_error;
  TF_ASSIGN_OR_RETURN(AlignedBuffer tb, AlignedBuffer::Allocate(h.block_table_copy_num_bytes));
  for (int copy = 0; copy < 2; ++copy) {
    const uint64_t offset = h.block_table_offset_bytes + copy * h.block_table_copy_num_bytes;
    TF_RETURN_IF_ERROR(PreadAll(fd, tb.data(), h.block_table_copy_num_bytes, offset, path));
    StatusOr<BlockTable> t =
        DecodeBlockTable(std::span<const uint8_t>(tb.data(), h.block_table_copy_num_bytes),
                         h.num_logical_blocks, path, offset);
    if (!t.ok()) {
      table_error = t.status();
      continue;
    }
    if (!best.has_value() || t->sequence > best->sequence) best = std::move(t).value();
  }
  if (!best.has_value()) return table_error;
  TF_RETURN_IF_ERROR(CheckBlockMap(h, *best, path));
  m.table = std::move(*best);
  return m;
}

Status CheckSwapSetMember(const SwapFileHeader& h, const std::string& path,
                          const std::string& run_id, uint32_t dir, uint32_t num_dirs,
                          const SwapFileHeader* first, const std::string& first_path) {
  if (h.run_id != run_id || h.dir_index != dir || h.num_dirs != num_dirs) {
    return DataLossError("swap file " + path + " belongs to run " + h.run_id + " directory " +
                         std::to_string(h.dir_index) + " of " + std::to_string(h.num_dirs) +
                         ", not run " + run_id + " directory " + std::to_string(dir) + " of " +
                         std::to_string(num_dirs) + "; list the directories in the original order");
  }
  if (first == nullptr) return Status::Ok();
  bool same =
      h.block_size_bytes == first->block_size_bytes && h.tensors.size() == first->tensors.size();
  for (size_t t = 0; same && t < h.tensors.size(); ++t) {
    same = h.tensors[t].name == first->tensors[t].name &&
           h.tensors[t].num_bytes == first->tensors[t].num_bytes &&
           h.tensors[t].start_dir == first->tensors[t].start_dir;
  }
  if (!same) {
    return DataLossError("swap file " + path + " has a tensor table that differs from " +
                         first_path + "'s");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<SwapFileView>> SwapFileView::Open(const std::string& path) {
  std::unique_ptr<SwapFileView> v(new SwapFileView());
  v->path_ = path;
  v->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (v->fd_ < 0) return ErrnoStatus(errno, "open " + path);
  TF_ASSIGN_OR_RETURN(SwapFileMetadata m, ReadSwapFileMetadata(v->fd_, path));
  v->header_ = std::move(m.header);
  v->table_ = std::move(m.table);
  v->file_bytes_ = m.file_bytes;
  return v;
}

SwapFileView::~SwapFileView() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t SwapFileView::num_blocks_written() const {
  return static_cast<uint64_t>(std::count_if(table_.physical.begin(), table_.physical.end(),
                                             [](uint32_t p) { return p != kUnmappedBlock; }));
}

bool SwapFileView::Locate(const SwapTensorEntry& t, uint64_t k, uint64_t* offset,
                          uint32_t* valid_bytes, uint32_t* crc) const {
  const uint64_t bs = header_.block_size_bytes;
  const uint64_t local = t.first_local_block + k / header_.num_dirs;
  *valid_bytes = static_cast<uint32_t>(std::min<uint64_t>(bs, t.num_bytes - k * bs));
  const uint32_t p = local < table_.physical.size() ? table_.physical[local] : kUnmappedBlock;
  if (p == kUnmappedBlock || p >= header_.num_physical_blocks) return false;
  *offset = header_.data_offset_bytes + uint64_t{p} * bs;
  *crc = table_.crc[local];
  return true;
}

Status SwapFileView::ReadBlock(const SwapTensorEntry& t, uint64_t k, uint8_t* dst) const {
  uint64_t offset = 0;
  uint32_t valid = 0, crc = 0;
  const uint64_t begin = k * header_.block_size_bytes;
  if (!Locate(t, k, &offset, &valid, &crc)) {
    return FailedPreconditionError("swap file " + path_ + ": tensor '" + t.name + "' bytes [" +
                                   std::to_string(begin) + ", " + std::to_string(begin + valid) +
                                   ") were never written");
  }
  TF_RETURN_IF_ERROR(PreadAll(fd_, dst, valid, offset, path_));
  const uint32_t got = Crc32c(0, dst, valid);
  if (got != crc) {
    return DataLossError("swap file " + path_ + ": tensor '" + t.name + "' bytes [" +
                         std::to_string(begin) + ", " + std::to_string(begin + valid) +
                         ") at file offset " + std::to_string(offset) +
                         ": CRC32C mismatch (stored " + std::to_string(crc) + ", data gives " +
                         std::to_string(got) + "); the data on the drive is corrupt");
  }
  return Status::Ok();
}

std::vector<SwapBlockProblem> SwapFileView::VerifyBlocks(uint64_t* num_blocks_checked) const {
  std::vector<SwapBlockProblem> problems;
  std::vector<uint8_t> buf(header_.block_size_bytes);
  const uint32_t n = header_.num_dirs;
  uint64_t checked = 0;
  for (const SwapTensorEntry& t : header_.tensors) {
    // This file's blocks of the tensor: k = first, first + n, first + 2n, ...
    const uint64_t first = (header_.dir_index + n - t.start_dir % n) % n;
    for (uint64_t k = first; k < t.num_blocks; k += n) {
      uint64_t offset = 0;
      uint32_t valid = 0, crc = 0;
      if (!Locate(t, k, &offset, &valid, &crc)) continue;  // never written: nothing to check
      ++checked;
      const uint64_t begin = k * header_.block_size_bytes;
      SwapBlockProblem problem{path_, t.name, begin, begin + valid, offset, ""};
      Status read = PreadAll(fd_, buf.data(), valid, offset, path_);
      if (!read.ok()) {
        problem.what = read.message();
        problems.push_back(problem);
        continue;
      }
      const uint32_t got = Crc32c(0, buf.data(), valid);
      if (got != crc) {
        problem.what = "CRC32C mismatch (stored " + std::to_string(crc) + ", data gives " +
                       std::to_string(got) + ")";
        problems.push_back(problem);
      }
    }
  }
  if (num_blocks_checked != nullptr) *num_blocks_checked = checked;
  return problems;
}

StatusOr<std::unique_ptr<SwapSetReader>> SwapSetReader::Open(
    const std::vector<std::string>& directories, const std::string& run_id) {
  if (directories.empty())
    return InvalidArgumentError("swap set " + run_id + ": no directory given");
  auto reader = std::make_unique<SwapSetReader>();
  for (uint32_t d = 0; d < directories.size(); ++d) {
    const std::string path = SwapFilePath(directories[d], run_id, d);
    TF_ASSIGN_OR_RETURN(auto view, SwapFileView::Open(path));
    TF_RETURN_IF_ERROR(CheckSwapSetMember(view->header(), path, run_id, d,
                                          static_cast<uint32_t>(directories.size()),
                                          d == 0 ? nullptr : &reader->files_[0]->header(),
                                          d == 0 ? path : reader->files_[0]->path()));
    reader->files_.push_back(std::move(view));
  }
  return reader;
}

const SwapTensorEntry* SwapSetReader::Find(std::string_view name) const {
  for (const auto& t : tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status SwapSetReader::Read(std::string_view name, void* dst, uint64_t num_bytes) const {
  const SwapTensorEntry* t = Find(name);
  if (t == nullptr) {
    return NotFoundError("swap set " + files_[0]->header().run_id + " (" + files_[0]->path() +
                         ") has no tensor '" + std::string(name) + "'");
  }
  if (t->num_bytes != num_bytes) {
    return InvalidArgumentError("tensor '" + t->name + "' is " + std::to_string(t->num_bytes) +
                                " bytes in the swap set, " + std::to_string(num_bytes) +
                                " expected");
  }
  const size_t index = static_cast<size_t>(t - tensors().data());
  const uint32_t n = static_cast<uint32_t>(files_.size());
  const uint64_t bs = files_[0]->header().block_size_bytes;
  std::vector<uint8_t> block(bs);
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t k = 0; k < t->num_blocks; ++k) {
    const SwapFileView& f = *files_[BlockDirectory(t->start_dir, k, n)];
    // The file's own entry (same index in every file): first_local_block differs per file.
    TF_RETURN_IF_ERROR(f.ReadBlock(f.header().tensors[index], k, block.data()));
    const uint64_t valid = std::min<uint64_t>(bs, num_bytes - k * bs);
    std::memcpy(out + k * bs, block.data(), valid);
  }
  return Status::Ok();
}

Status SwapSetReader::ReadRange(std::string_view name, uint64_t byte_offset, void* dst,
                                uint64_t num_bytes) const {
  const SwapTensorEntry* t = Find(name);
  if (t == nullptr) {
    return NotFoundError("swap set " + files_[0]->header().run_id + " (" + files_[0]->path() +
                         ") has no tensor '" + std::string(name) + "'");
  }
  if (byte_offset > t->num_bytes || num_bytes > t->num_bytes - byte_offset) {
    return InvalidArgumentError("tensor '" + t->name + "': bytes [" + std::to_string(byte_offset) +
                                ", +" + std::to_string(num_bytes) + ") are outside its " +
                                std::to_string(t->num_bytes));
  }
  if (num_bytes == 0) return Status::Ok();
  const size_t index = static_cast<size_t>(t - tensors().data());
  const uint32_t n = static_cast<uint32_t>(files_.size());
  const uint64_t bs = files_[0]->header().block_size_bytes;
  std::vector<uint8_t> block(bs);
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t end = byte_offset + num_bytes;
  for (uint64_t k = byte_offset / bs; k * bs < end; ++k) {
    const SwapFileView& f = *files_[BlockDirectory(t->start_dir, k, n)];
    TF_RETURN_IF_ERROR(f.ReadBlock(f.header().tensors[index], k, block.data()));
    const uint64_t from = std::max(byte_offset, k * bs), to = std::min(end, (k + 1) * bs);
    std::memcpy(out + (from - byte_offset), block.data() + (from - k * bs), to - from);
  }
  return Status::Ok();
}

}  // namespace tierflow::offload

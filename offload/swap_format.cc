// Encoding and strict decoding of swap-file headers and block tables. The
// decoder trusts nothing: every length is bounded by the bytes present and
// every field is checked before use, so a corrupt file is a DataLoss error.
#include "offload/swap_format.h"

#include <cstring>

#include "offload/aligned_buffer.h"
#include "offload/crc32c.h"

namespace tierflow::offload {
namespace {

constexpr size_t kHeaderPrefixBytes =
    24;                                   // magic u64, version u32, total u32, payload u32, crc u32
constexpr size_t kTablePrefixBytes = 32;  // magic u64, sequence u64, count u64, crc u32, pad u32
constexpr size_t kMaxNameBytes = 4096;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint16_t>(static_cast<uint16_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - at_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint16_t n = 0;
    if (!Get(&n) || b_.size() - at_ < n) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + at_), n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

Status Corrupt(std::string_view path, const std::string& what) {
  return DataLossError("swap file " + std::string(path) + ": " + what +
                       "; the file is corrupt or not a tierflow swap file (remove the set with "
                       "`tierflow tier clean DIR`)");
}

}  // namespace

uint64_t BlocksInDirectory(uint64_t num_blocks, uint32_t start_dir, uint32_t dir,
                           uint32_t num_dirs) {
  uint64_t first = (dir + num_dirs - start_dir % num_dirs) % num_dirs;
  return first < num_blocks ? (num_blocks - first + num_dirs - 1) / num_dirs : 0;
}

std::vector<uint8_t> EncodeSwapHeader(const SwapFileHeader& h) {
  Writer p;
  p.PutString(h.run_id);
  p.Put<uint32_t>(h.dir_index);
  p.Put<uint32_t>(h.num_dirs);
  p.Put<uint32_t>(h.block_size_bytes);
  p.Put<uint64_t>(h.num_logical_blocks);
  p.Put<uint64_t>(h.num_physical_blocks);
  p.Put<uint64_t>(h.block_table_offset_bytes);
  p.Put<uint64_t>(h.block_table_copy_num_bytes);
  p.Put<uint64_t>(h.data_offset_bytes);
  p.Put<uint32_t>(static_cast<uint32_t>(h.tensors.size()));
  for (const SwapTensorEntry& t : h.tensors) {
    p.PutString(t.name);
    p.Put<uint8_t>(static_cast<uint8_t>(t.dtype));
    p.Put<uint64_t>(t.num_bytes);
    p.Put<uint64_t>(t.num_blocks);
    p.Put<uint32_t>(t.start_dir);
    p.Put<uint64_t>(t.first_local_block);
  }
  std::vector<uint8_t>& payload = p.bytes();
  uint64_t total = RoundUp(kHeaderPrefixBytes + payload.size(), kDirectIoAlignment);
  std::vector<uint8_t> out(total, 0);
  uint64_t magic = kSwapHeaderMagic;
  uint32_t version = h.version, total32 = static_cast<uint32_t>(total),
           payload32 = static_cast<uint32_t>(payload.size()), crc = 0;
  std::memcpy(out.data(), &magic, 8);
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &total32, 4);
  std::memcpy(out.data() + 16, &payload32, 4);
  std::memcpy(out.data() + kHeaderPrefixBytes, payload.data(), payload.size());
  crc = Crc32c(0, out.data(), 20);
  crc = Crc32c(crc, out.data() + kHeaderPrefixBytes, payload.size());
  std::memcpy(out.data() + 20, &crc, 4);
  return out;
}

StatusOr<uint64_t> SwapHeaderSize(std::span<const uint8_t> prefix, std::string_view path) {
  if (prefix.size() < kHeaderPrefixBytes) return Corrupt(path, "shorter than a header");
  uint64_t magic = 0;
  uint32_t total = 0;
  std::memcpy(&magic, prefix.data(), 8);
  std::memcpy(&total, prefix.data() + 12, 4);
  if (magic != kSwapHeaderMagic) return Corrupt(path, "bad magic number at offset 0");
  if (total < kDirectIoAlignment || total % kDirectIoAlignment != 0 || total > (64u << 20)) {
    return Corrupt(path, "implausible header size " + std::to_string(total));
  }
  return uint64_t{total};
}

StatusOr<SwapFileHeader> DecodeSwapHeader(std::span<const uint8_t> bytes, std::string_view path) {
  TF_ASSIGN_OR_RETURN(uint64_t total, SwapHeaderSize(bytes, path));
  if (bytes.size() < total) return Corrupt(path, "header truncated");
  SwapFileHeader h;
  uint32_t payload_size = 0, stored_crc = 0;
  std::memcpy(&h.version, bytes.data() + 8, 4);
  std::memcpy(&payload_size, bytes.data() + 16, 4);
  std::memcpy(&stored_crc, bytes.data() + 20, 4);
  if (payload_size > total - kHeaderPrefixBytes) return Corrupt(path, "header payload overruns it");
  uint32_t crc = Crc32c(0, bytes.data(), 20);
  crc = Crc32c(crc, bytes.data() + kHeaderPrefixBytes, payload_size);
  if (crc != stored_crc) {
    return Corrupt(path, "header checksum mismatch (stored " + std::to_string(stored_crc) +
                             ", computed " + std::to_string(crc) + ")");
  }
  if (h.version > kSwapFormatVersion) {
    return UnimplementedError("swap file " + std::string(path) + " has format version " +
                              std::to_string(h.version) + "; this tierflow reads up to " +
                              std::to_string(kSwapFormatVersion) + ": upgrade tierflow");
  }
  Reader r(bytes.subspan(kHeaderPrefixBytes, payload_size));
  uint32_t num_tensors = 0;
  bool ok = r.GetString(&h.run_id) && r.Get(&h.dir_index) && r.Get(&h.num_dirs) &&
            r.Get(&h.block_size_bytes) && r.Get(&h.num_logical_blocks) &&
            r.Get(&h.num_physical_blocks) && r.Get(&h.block_table_offset_bytes) &&
            r.Get(&h.block_table_copy_num_bytes) && r.Get(&h.data_offset_bytes) &&
            r.Get(&num_tensors);
  if (!ok) return Corrupt(path, "header fields truncated");
  if (h.num_dirs == 0 || h.dir_index >= h.num_dirs || h.block_size_bytes == 0 ||
      h.block_size_bytes % kDirectIoAlignment != 0 ||
      h.num_physical_blocks < h.num_logical_blocks || h.num_physical_blocks >= kUnmappedBlock ||
      h.num_logical_blocks > (uint64_t{1} << 40) ||
      h.block_table_copy_num_bytes != BlockTableCopySize(h.num_logical_blocks) ||
      // Written as subtractions: the sums could wrap around for hostile values.
      h.data_offset_bytes < h.block_table_offset_bytes ||
      (h.data_offset_bytes - h.block_table_offset_bytes) / 2 < h.block_table_copy_num_bytes) {
    return Corrupt(path, "inconsistent geometry in header");
  }
  for (uint32_t i = 0; i < num_tensors; ++i) {
    SwapTensorEntry t;
    uint8_t dtype = 0;
    ok = r.GetString(&t.name) && r.Get(&dtype) && r.Get(&t.num_bytes) && r.Get(&t.num_blocks) &&
         r.Get(&t.start_dir) && r.Get(&t.first_local_block);
    if (!ok) return Corrupt(path, "tensor table truncated at entry " + std::to_string(i));
    if (dtype > static_cast<uint8_t>(DType::kF16) || t.name.empty() ||
        t.name.size() > kMaxNameBytes || t.start_dir >= h.num_dirs ||
        // ceil(num_bytes / block) without the wrapping of num_bytes + block - 1.
        t.num_blocks !=
            t.num_bytes / h.block_size_bytes + (t.num_bytes % h.block_size_bytes != 0) ||
        t.first_local_block > h.num_logical_blocks ||
        BlocksInDirectory(t.num_blocks, t.start_dir, h.dir_index, h.num_dirs) >
            h.num_logical_blocks - t.first_local_block) {
      return Corrupt(
          path, "tensor table entry " + std::to_string(i) + " ('" + t.name + "') is inconsistent");
    }
    t.dtype = static_cast<DType>(dtype);
    h.tensors.push_back(std::move(t));
  }
  if (!r.done()) return Corrupt(path, "trailing bytes after the tensor table");
  return h;
}

uint64_t BlockTableCopySize(uint64_t num_logical_blocks) {
  return RoundUp(kTablePrefixBytes + 8 * num_logical_blocks, kDirectIoAlignment);
}

void EncodeBlockTable(const BlockTable& table, std::span<uint8_t> out) {
  std::memset(out.data(), 0, out.size());
  uint64_t magic = kBlockTableMagic, n = table.physical.size();
  std::memcpy(out.data(), &magic, 8);
  std::memcpy(out.data() + 8, &table.sequence, 8);
  std::memcpy(out.data() + 16, &n, 8);
  if (n > 0) {  // an empty vector's data() may be null: memcpy from null is UB even for 0 bytes
    std::memcpy(out.data() + kTablePrefixBytes, table.physical.data(), 4 * n);
    std::memcpy(out.data() + kTablePrefixBytes + 4 * n, table.crc.data(), 4 * n);
  }
  uint32_t crc = Crc32c(0, out.data(), 24);
  crc = Crc32c(crc, out.data() + kTablePrefixBytes, 8 * n);
  std::memcpy(out.data() + 24, &crc, 4);
}

StatusOr<BlockTable> DecodeBlockTable(std::span<const uint8_t> bytes, uint64_t num_logical_blocks,
                                      std::string_view path, uint64_t offset_bytes) {
  std::string where = "block table at offset " + std::to_string(offset_bytes);
  if (bytes.size() < BlockTableCopySize(num_logical_blocks))
    return Corrupt(path, where + " truncated");
  uint64_t magic = 0, n = 0;
  uint32_t stored_crc = 0;
  BlockTable t;
  std::memcpy(&magic, bytes.data(), 8);
  std::memcpy(&t.sequence, bytes.data() + 8, 8);
  std::memcpy(&n, bytes.data() + 16, 8);
  std::memcpy(&stored_crc, bytes.data() + 24, 4);
  if (magic != kBlockTableMagic)
    return Corrupt(path, where + ": bad magic number (never written?)");
  if (n != num_logical_blocks)
    return Corrupt(path, where + ": block count differs from the header");
  uint32_t crc = Crc32c(0, bytes.data(), 24);
  crc = Crc32c(crc, bytes.data() + kTablePrefixBytes, 8 * n);
  if (crc != stored_crc) return Corrupt(path, where + ": checksum mismatch");
  t.physical.resize(n);
  t.crc.resize(n);
  if (n > 0) {
    std::memcpy(t.physical.data(), bytes.data() + kTablePrefixBytes, 4 * n);
    std::memcpy(t.crc.data(), bytes.data() + kTablePrefixBytes + 4 * n, 4 * n);
  }
  return t;
}

}  // namespace tierflow::offload

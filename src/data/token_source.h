// TokenSource: a read-only sequence of token ids the DataLoader cuts batches
// from, held in memory (tokenized text) or memory-mapped (token files).
//
// Token files come in the two layouts nanoGPT and llm.c write:
//   raw     little-endian uint16 or uint32 ids, nothing else (nanoGPT's
//           train.bin); the dtype is given by the caller (--token-dtype).
//   llm.c   a 1024-byte header of 256 little-endian int32: header[0] magic,
//           header[1] version, header[2] number of tokens; then the ids.
//           magic 20240520 version 1 = GPT-2, uint16 ids; magic 20240801
//           version 7 = Llama 3, uint32 ids (llm.c's dev/data/data_common.py).
// A file whose first int32 is one of those magics is read as llm.c; anything
// else is raw. Token files are mapped, not read, so a large file costs
// address space, not RAM; every id is checked against the vocabulary once,
// when the file is opened (one linear pass).
//
// Copying a TokenSource is cheap: copies share the tokens. Thread-safe for
// concurrent reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

enum class TokenDtype { kU16, kU32 };

// "u16" or "u32". Errors: InvalidArgument naming the bad name and the choices.
StatusOr<TokenDtype> ParseTokenDtype(std::string_view name);
std::string_view TokenDtypeName(TokenDtype dtype);

inline constexpr int32_t kLlmcGpt2Magic = 20240520;    // version 1, uint16 tokens
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // version 7, uint32 tokens
inline constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

class TokenSource {
 public:
  TokenSource() = default;  // no tokens

  // Tokens already in memory. `name` names them in errors (usually the file
  // they came from). Errors: InvalidArgument when empty, when vocab_size <= 0,
  // or naming the first id outside [0, vocab_size) and its index.
  static StatusOr<TokenSource> FromTokens(std::vector<int32_t> tokens, std::string name,
                                          int32_t vocab_size);

  int64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Bytes per token as stored: 2 (uint16 files) or 4.
  int element_bytes() const { return element_bytes_; }

  // REQUIRES: 0 <= i < size().
  int32_t At(int64_t i) const;
  // Copies ids [begin, begin + count) into out as int32.
  // REQUIRES: 0 <= begin, count >= 0, begin + count <= size().
  void Read(int64_t begin, int64_t count, int32_t* out) const;

 private:
  friend StatusOr<TokenSource> OpenTokenFile(const std::string& path,
                                             std::optional<TokenDtype> dtype, int32_t vocab_size);
  // Checks every id against vocab_size.
  Status Validate(int32_t vocab_size) const;

  std::string name_;
  std::shared_ptr<const void> owner_;  // keeps data_ alive: a MappedFile or a vector
  const std::byte* data_ = nullptr;
  int element_bytes_ = 4;
  int64_t size_ = 0;
};

// Opens a token file (raw or llm.c, see above). `dtype` is the element type
// of a raw file (Default when unset: u16, as nanoGPT writes); for an llm.c
// file it may be unset or must agree with the header. `vocab_size` is the
// model's vocabulary. Errors, each naming the path:
//   InvalidArgument  the file is empty or has no tokens; an id >= vocab_size
//                    (with its index); --token-dtype disagrees with the
//                    header; an llm.c version tierflow does not read
//   DataLoss         a raw file whose size is not a whole number of tokens;
//                    an llm.c header cut short, or a size that disagrees
//                    with the header's token count
//   NotFound/...     the file cannot be opened (ErrnoStatus)
StatusOr<TokenSource> OpenTokenFile(const std::string& path, std::optional<TokenDtype> dtype,
                                    int32_t vocab_size);

// Writes `tokens` as an llm.c token file (for tests and tools that convert
// data): the GPT-2 header (uint16) when `dtype` is u16, Llama 3's when u32,
// replaced crash-safely (WriteStringToFileAtomically). Errors:
// InvalidArgument when an id does not fit the dtype; those of the write.
Status WriteLlmcTokenFile(const std::string& path, const std::vector<int32_t>& tokens,
                          TokenDtype dtype);

}  // namespace tierflow

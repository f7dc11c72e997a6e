// TokenSource: in-memory and memory-mapped token ids; raw and llm.c token files.
#include "data/token_source.h"

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/cancel.h"
#include "data/file_util.h"
#include "io/file_system.h"

namespace tierflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read in place; add byte swapping for this host");

int64_t ElementBytes(TokenDtype dtype) { return dtype == TokenDtype::kU16 ? 2 : 4; }

// The header's description of itself, or an error naming the path.
struct LlmcLayout {
  TokenDtype dtype;
  int64_t num_tokens;
};

StatusOr<LlmcLayout> ParseLlmcHeader(const std::string& path, std::span<const std::byte> bytes) {
  if (bytes.size() < kLlmcHeaderBytes) {
    return DataLossError(path + ": starts with an llm.c magic number but has only " +
                         std::to_string(bytes.size()) + " bytes; the llm.c header is " +
                         std::to_string(kLlmcHeaderBytes) + " bytes (truncated file?)");
  }
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  LlmcLayout layout;
  int32_t expected_version;
  if (header[0] == kLlmcGpt2Magic) {
    layout.dtype = TokenDtype::kU16;
    expected_version = 1;
  } else {
    layout.dtype = TokenDtype::kU32;
    expected_version = 7;
  }
  if (header[1] != expected_version) {
    return InvalidArgumentError(path + ": llm.c header with magic " + std::to_string(header[0]) +
                                " has version " + std::to_string(header[1]) +
                                "; tierflow reads version " + std::to_string(expected_version) +
                                " (" + std::string(TokenDtypeName(layout.dtype)) + " tokens)");
  }
  if (header[2] < 0) {
    return DataLossError(path + ": llm.c header says " + std::to_string(header[2]) +
                         " tokens; the count cannot be negative (corrupt header)");
  }
  layout.num_tokens = header[2];
  const uint64_t expected_bytes =
      kLlmcHeaderBytes + static_cast<uint64_t>(layout.num_tokens) * ElementBytes(layout.dtype);
  if (bytes.size() != expected_bytes) {
    return DataLossError(
        path + ": llm.c header says " + std::to_string(layout.num_tokens) + " " +
        std::string(TokenDtypeName(layout.dtype)) + " tokens (" + std::to_string(expected_bytes) +
        " bytes with the header) but the file has " + std::to_string(bytes.size()) + " bytes (" +
        (bytes.size() < expected_bytes ? "truncated" : "trailing bytes") + ")");
  }
  return layout;
}

}  // namespace

StatusOr<TokenDtype> ParseTokenDtype(std::string_view name) {
  if (name == "u16" || name == "uint16") return TokenDtype::kU16;
  if (name == "u32" || name == "uint32") return TokenDtype::kU32;
  return InvalidArgumentError("unknown token dtype \"" + std::string(name) + "\": use u16 or u32");
}

std::string_view TokenDtypeName(TokenDtype dtype) {
  return dtype == TokenDtype::kU16 ? "u16" : "u32";
}

int32_t TokenSource::At(int64_t i) const {
  if (element_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, data_ + i * 2, 2);
    return v;
  }
  int32_t v;
  std::memcpy(&v, data_ + i * 4, 4);
  return v;
}

void TokenSource::Read(int64_t begin, int64_t count, int32_t* out) const {
  if (element_bytes_ == 4) {
    std::memcpy(out, data_ + begin * 4, static_cast<size_t>(count) * 4);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    uint16_t v;
    std::memcpy(&v, data_ + (begin + i) * 2, 2);
    out[i] = v;
  }
}

Status TokenSource::Validate(int32_t vocab_size) const {
  if (vocab_size <= 0) {
    return InvalidArgumentError(name_ + ": vocab_size must be positive, got " +
                                std::to_string(vocab_size));
  }
  for (int64_t i = 0; i < size_; ++i) {
    if (i % (int64_t{1} << 22) == 0 && CancelRequested()) {
      TF_RETURN_IF_ERROR(CheckCancel("checking the token ids of " + name_));
    }
    // Read as unsigned so a uint32 id above 2^31 is reported as itself.
    uint32_t id;
    if (element_bytes_ == 2) {
      uint16_t v;
      std::memcpy(&v, data_ + i * 2, 2);
      id = v;
    } else {
      std::memcpy(&id, data_ + i * 4, 4);
    }
    if (id >= static_cast<uint32_t>(vocab_size)) {
      return InvalidArgumentError(name_ + ": token id " + std::to_string(id) + " at token index " +
                                  std::to_string(i) + " is not below the vocabulary size " +
                                  std::to_string(vocab_size) +
                                  "; the data was tokenized for another vocabulary, or "
                                  "--token-dtype is wrong");
    }
  }
  return Status::Ok();
}

StatusOr<TokenSource> TokenSource::FromTokens(std::vector<int32_t> tokens, std::string name,
                                              int32_t vocab_size) {
  if (tokens.empty()) return InvalidArgumentError(name + " has no tokens");
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  TokenSource s;
  s.name_ = std::move(name);
  s.data_ = reinterpret_cast<const std::byte*>(owned->data());
  s.element_bytes_ = 4;
  s.size_ = static_cast<int64_t>(owned->size());
  s.owner_ = std::move(owned);
  TF_RETURN_IF_ERROR(s.Validate(vocab_size));
  return s;
}

StatusOr<TokenSource> OpenTokenFile(const std::string& path, std::optional<TokenDtype> dtype,
                                    int32_t vocab_size) {
  TF_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  std::span<const std::byte> bytes = file->bytes();
  if (bytes.empty()) return InvalidArgumentError(path + " is empty; a token file needs tokens");

  int32_t magic = 0;
  if (bytes.size() >= sizeof(magic)) std::memcpy(&magic, bytes.data(), sizeof(magic));
  TokenSource s;
  s.name_ = path;
  if (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic) {
    TF_ASSIGN_OR_RETURN(LlmcLayout layout, ParseLlmcHeader(path, bytes));
    if (dtype.has_value() && *dtype != layout.dtype) {
      return InvalidArgumentError(path + " has an llm.c header saying its tokens are " +
                                  std::string(TokenDtypeName(layout.dtype)) +
                                  " but --token-dtype " + std::string(TokenDtypeName(*dtype)) +
                                  " was given; drop the flag or fix it");
    }
    if (layout.num_tokens == 0)
      return InvalidArgumentError(path + ": the llm.c header says it has no tokens");
    s.data_ = bytes.data() + kLlmcHeaderBytes;
    s.element_bytes_ = static_cast<int>(ElementBytes(layout.dtype));
    s.size_ = layout.num_tokens;
  } else {
    const TokenDtype d = dtype.value_or(TokenDtype::kU16);
    const int64_t element_bytes = ElementBytes(d);
    if (bytes.size() % element_bytes != 0) {
      return DataLossError(path + " has " + std::to_string(bytes.size()) +
                           " bytes, not a whole number of " + std::string(TokenDtypeName(d)) +
                           " tokens (" + std::to_string(element_bytes) +
                           " bytes each); wrong --token-dtype or a truncated file?");
    }
    s.data_ = bytes.data();
    s.element_bytes_ = static_cast<int>(element_bytes);
    s.size_ = static_cast<int64_t>(bytes.size()) / element_bytes;
  }
  s.owner_ = std::shared_ptr<const MappedFile>(std::move(file));
  TF_RETURN_IF_ERROR(s.Validate(vocab_size));
  return s;
}

Status WriteLlmcTokenFile(const std::string& path, const std::vector<int32_t>& tokens,
                          TokenDtype dtype) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError(path + ": " + std::to_string(tokens.size()) +
                                " tokens do not fit the llm.c header's int32 count");
  }
  std::vector<int32_t> header(256, 0);
  header[0] = dtype == TokenDtype::kU16 ? kLlmcGpt2Magic : kLlmcLlama3Magic;
  header[1] = dtype == TokenDtype::kU16 ? 1 : 7;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), kLlmcHeaderBytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t < 0 || (dtype == TokenDtype::kU16 && t > 0xFFFF)) {
      return InvalidArgumentError("token " + std::to_string(t) + " at index " + std::to_string(i) +
                                  " does not fit " + std::string(TokenDtypeName(dtype)));
    }
    if (dtype == TokenDtype::kU16) {
      const auto v = static_cast<uint16_t>(t);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      bytes.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  // As every file tierflow writes: replaced crash-safely, never through a link.
  return WriteStringToFileAtomically(nullptr, path, bytes);
}

}  // namespace tierflow

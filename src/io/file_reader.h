// The one whole-file reader: configs, JSON indexes, tokenizer files, text
// datasets and small /proc or /sys files are all read through here.
//
// A whole-file read trusts the file to be of a sensible size; every caller
// states the most it accepts, so a wrong path (a multi-GB checkpoint shard
// named as config.json, /dev/zero) fails with a message naming the file
// instead of exhausting memory. errno becomes a Status here, once, naming the
// path. Files too large to read whole (token files, swap files) are
// memory-mapped or streamed by their own readers, not read here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tierflow/status.h"

namespace tierflow {

// What a streaming checksum of a file (a checkpoint's CRC32C) reads at a time.
inline constexpr uint64_t kFileChecksumBufferBytes = 4ull << 20;

struct ReadFileOptions {
  // Refuse a symbolic link as the last path component (O_NOFOLLOW): for
  // files inside a directory tierflow owns, where a link is an intrusion.
  bool no_follow = false;
};

// Reads the whole file at `path`, which holds at most `max_num_bytes` bytes.
// Interrupted system calls (EINTR) are retried. Errors:
//  - ErrnoStatus naming the path for open/fstat/read failures (NotFound when
//    it does not exist; with options.no_follow, a symlink fails with ELOOP);
//  - InvalidArgument naming the path when it is a directory, or when it holds
//    more than `max_num_bytes` bytes (checked both against its size up front
//    and while reading, so files whose size is not known in advance, such as
//    pipes and /proc files, are capped too).
// An empty file gives an empty string (callers that need content say so).
StatusOr<std::string> ReadFileToString(const std::string& path, size_t max_num_bytes,
                                       const ReadFileOptions& options = {});

}  // namespace tierflow

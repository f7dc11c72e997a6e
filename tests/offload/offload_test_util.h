// Helpers shared by the offload tests: a scratch directory on a real disk
// (/tmp is ext4 here, so O_DIRECT works), patterned data, and buffers.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "offload/aligned_buffer.h"

namespace tierflow::offload::testing_util {

// A fresh directory removed (with everything in it) on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent = "/tmp") {
    std::string templ = parent + "/tierflow-offload-test-XXXXXX";
    char* p = mkdtemp(templ.data());
    EXPECT_NE(p, nullptr) << "mkdtemp under " << parent;
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Deterministic bytes that differ per (seed, position).
inline void FillPattern(uint8_t* data, size_t num_bytes, uint32_t seed) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < num_bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = static_cast<uint8_t>(x);
  }
}

inline AlignedBuffer MakeBuffer(size_t num_bytes, uint32_t seed) {
  StatusOr<AlignedBuffer> b = AlignedBuffer::Allocate(num_bytes);
  EXPECT_TRUE(b.ok());
  FillPattern(b->data(), num_bytes, seed);
  return std::move(b).value();
}

}  // namespace tierflow::offload::testing_util

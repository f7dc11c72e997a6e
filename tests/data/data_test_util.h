// Helpers for the data tests: scratch directories, file bytes, and a small
// hand-made GPT-2-style vocabulary (vocab.json + merges.txt) whose ids are
// deliberately not the byte values, so tests catch a byte/id mix-up.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "tests/common/scratch_dir.h"

#include "data/gpt2_byte_level.h"

namespace tierflow::testing_data {

// A fresh directory under the test temp dir, removed with everything in it.
class ScratchDir : public testing_common::ScratchDir {
 public:
  ScratchDir() : testing_common::ScratchDir("tierflow_data_") {}
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// Little-endian bytes of `values` as T (uint16_t, uint32_t or int32_t).
template <typename T, typename V>
std::string PackAs(const std::vector<V>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const T v = static_cast<T>(values[i]);
    std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
  return bytes;
}

// The fixture's id for single byte b: a permutation of 0..255 (7 is odd).
inline int FixtureByteId(int b) { return (b * 7 + 3) % 256; }

// Merges in rank order, in raw bytes; each makes the token left + right.
inline std::vector<std::pair<std::string, std::string>> FixtureMerges() {
  return {
      {" ", "t"},        // rank 0: " t"
      {"h", "e"},        // rank 1: "he"
      {" t", "he"},      // rank 2: " the" (needs ranks 0 and 1 first)
      {"b", "c"},        // rank 3: "bc"  (beats "ab" in "abc")
      {"a", "b"},        // rank 4: "ab"
      {"a", "a"},        // rank 5: "aa"
      {"\xC3", "\xA9"},  // rank 6: "é" as one token
      {"l", "l"},        // rank 7: "ll"
      {"he", "ll"},      // rank 8: "hell"
      {"hell", "o"},     // rank 9: "hello"
  };
}

inline constexpr int kFixtureEotId = 300;

// vocab.json text: 256 byte tokens, one per merge (ids 256..), and <|endoftext|> = 300.
inline std::string FixtureVocabJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[Gpt2BytesToVocabText(std::string(1, static_cast<char>(b)))] = FixtureByteId(b);
  }
  int next_id = 256;
  for (const auto& [l, r] : FixtureMerges()) vocab[Gpt2BytesToVocabText(l + r)] = next_id++;
  vocab["<|endoftext|>"] = kFixtureEotId;
  return vocab.dump();
}

inline std::string FixtureMergesTxt() {
  std::string text = "#version: 0.2\n";
  for (const auto& [l, r] : FixtureMerges()) {
    text += Gpt2BytesToVocabText(l) + " " + Gpt2BytesToVocabText(r) + "\n";
  }
  return text;
}

// The id of the merge token whose bytes are `bytes`.
inline int FixtureMergedId(const std::string& bytes) {
  int id = 256;
  for (const auto& [l, r] : FixtureMerges()) {
    if (l + r == bytes) return id;
    ++id;
  }
  ADD_FAILURE() << "no fixture token " << bytes;
  return -1;
}

}  // namespace tierflow::testing_data

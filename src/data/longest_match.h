// LongestMatchFinder: for a set of byte strings, the longest one that starts
// at each position of a text, found for all positions in one pass whose time
// is linear in the text, however many strings there are and however long.
// The added-token matcher (hf_added_tokens.h) uses it: tokenizers with 100k
// added tokens exist, and comparing each against every position took time
// proportional to text length times token count.
//
// An Aho-Corasick automaton over the reversed strings, run over the text from
// its end: after reading text[i..n) backwards, the automaton's state is the
// longest prefix of a reversed string that ends what was read, and its output
// link the longest whole reversed string that does, which is the longest
// string starting at i. Each byte costs one transition plus the failure links
// it follows, and failure links only give back depth that transitions added,
// so a text of n bytes takes at most 2n steps.
//
// Memory is linear in the strings' total length (about 20 bytes per byte).
// Immutable after construction and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tierflow {

class LongestMatchFinder {
 public:
  LongestMatchFinder() = default;  // no strings: nothing matches
  // REQUIRES: every string is non-empty and they are distinct.
  explicit LongestMatchFinder(const std::vector<std::string_view>& strings);

  struct Match {
    size_t begin = 0;     // where in the text
    uint32_t string = 0;  // index into the constructor's `strings`
  };
  // Every position of `text` where some string starts, in increasing order,
  // with the longest string starting there. `steps`, when not null, receives
  // the automaton steps taken (at most 2 * text.size()).
  std::vector<Match> FindLongestAt(std::string_view text, uint64_t* steps = nullptr) const;

  bool empty() const { return num_strings_ == 0; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // The node reached from `node` by `byte`, or kNone.
  uint32_t Next(uint32_t node, uint8_t byte) const;

  // Node 0 is the root. A node's edges are edges_[edge_begin_[node],
  // edge_begin_[node + 1]), sorted by byte; the root's are also in root_next_.
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  std::vector<uint32_t> edge_begin_;
  std::vector<Edge> edges_;
  std::array<uint32_t, 256> root_next_{};
  std::vector<uint32_t> fail_;
  std::vector<int32_t> output_;  // the longest string ending at the node, or -1
  size_t num_strings_ = 0;
};

}  // namespace tierflow

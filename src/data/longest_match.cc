// The reversed Aho-Corasick automaton of longest_match.h.
#include "data/longest_match.h"

#include <algorithm>
#include <string>
#include <utility>

namespace tierflow {

LongestMatchFinder::LongestMatchFinder(const std::vector<std::string_view>& strings)
    : num_strings_(strings.size()) {
  // The trie of the reversed strings, built in sorted order: each string
  // shares with the previous one exactly the path of their common prefix, and
  // a node's children are created in increasing byte order.
  std::vector<std::pair<std::string, uint32_t>> reversed;
  reversed.reserve(strings.size());
  for (uint32_t i = 0; i < strings.size(); ++i) {
    reversed.emplace_back(std::string(strings[i].rbegin(), strings[i].rend()), i);
  }
  std::sort(reversed.begin(), reversed.end());

  struct Created {
    uint32_t parent;
    uint8_t byte;
  };
  std::vector<Created> created{{0, 0}};  // by node; the root's entry is unused
  output_.assign(1, -1);
  std::vector<uint32_t> path{0};  // the previous string's nodes by depth
  std::string_view previous;
  for (const auto& [text, index] : reversed) {
    size_t common = 0;
    while (common < previous.size() && common < text.size() && previous[common] == text[common]) {
      ++common;
    }
    path.resize(common + 1);
    for (size_t d = common; d < text.size(); ++d) {
      const auto node = static_cast<uint32_t>(created.size());
      created.push_back({path.back(), static_cast<uint8_t>(text[d])});
      output_.push_back(-1);
      path.push_back(node);
    }
    output_[path.back()] = static_cast<int32_t>(index);
    previous = text;
  }

  // Edges grouped by parent (a stable placement keeps each group in byte order).
  const size_t num_nodes = created.size();
  edge_begin_.assign(num_nodes + 1, 0);
  for (size_t node = 1; node < num_nodes; ++node) ++edge_begin_[created[node].parent + 1];
  for (size_t node = 0; node < num_nodes; ++node) edge_begin_[node + 1] += edge_begin_[node];
  edges_.resize(num_nodes - 1);
  std::vector<uint32_t> fill(edge_begin_.begin(), edge_begin_.end() - 1);
  for (size_t node = 1; node < num_nodes; ++node) {
    edges_[fill[created[node].parent]++] = {created[node].byte, static_cast<uint32_t>(node)};
  }
  root_next_.fill(kNone);
  for (uint32_t e = edge_begin_[0]; e < edge_begin_[1]; ++e)
    root_next_[edges_[e].byte] = edges_[e].child;

  // Failure and output links, breadth first (a node's links need those of
  // shallower nodes).
  fail_.assign(num_nodes, 0);
  std::vector<uint32_t> queue;
  queue.reserve(num_nodes);
  queue.push_back(0);
  for (size_t head = 0; head < queue.size(); ++head) {
    const uint32_t node = queue[head];
    for (uint32_t e = edge_begin_[node]; e < edge_begin_[node + 1]; ++e) {
      const auto [byte, child] = edges_[e];
      queue.push_back(child);
      if (node == 0) continue;  // depth 1: fails to the root
      uint32_t f = fail_[node];
      uint32_t next = Next(f, byte);
      while (next == kNone && f != 0) {
        f = fail_[f];
        next = Next(f, byte);
      }
      fail_[child] = next == kNone ? 0 : next;
      if (output_[child] < 0) output_[child] = output_[fail_[child]];
    }
  }
}

uint32_t LongestMatchFinder::Next(uint32_t node, uint8_t byte) const {
  if (node == 0) return root_next_[byte];
  const Edge* begin = edges_.data() + edge_begin_[node];
  const Edge* end = edges_.data() + edge_begin_[node + 1];
  const Edge* it =
      std::lower_bound(begin, end, byte, [](const Edge& e, uint8_t b) { return e.byte < b; });
  return it != end && it->byte == byte ? it->child : kNone;
}

std::vector<LongestMatchFinder::Match> LongestMatchFinder::FindLongestAt(std::string_view text,
                                                                         uint64_t* steps) const {
  std::vector<Match> out;
  uint64_t taken = 0;
  if (num_strings_ > 0) {
    uint32_t state = 0;
    for (size_t i = text.size(); i-- > 0;) {
      const auto byte = static_cast<uint8_t>(text[i]);
      while (true) {
        ++taken;
        const uint32_t next = Next(state, byte);
        if (next != kNone) {
          state = next;
          break;
        }
        if (state == 0) break;
        state = fail_[state];
      }
      if (output_[state] >= 0) out.push_back({i, static_cast<uint32_t>(output_[state])});
    }
    std::reverse(out.begin(), out.end());
  }
  if (steps != nullptr) *steps = taken;
  return out;
}

}  // namespace tierflow

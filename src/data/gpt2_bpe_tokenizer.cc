// Gpt2BpeTokenizer: vocabulary validation, the BPE merge loop, encode/decode.
#include "data/gpt2_bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <queue>

#include "common/cancel.h"
#include "data/gpt2_byte_level.h"
#include "data/gpt2_pretokenize.h"

namespace tierflow {
namespace {

// How many ids below the largest one may be unused (see Create).
constexpr int64_t kMaxIdHoles = 65536;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A token's bytes as vocab.json writes them, for error messages.
std::string Quoted(const std::string& bytes) {
  std::string out = "\"";
  out += Gpt2BytesToVocabText(bytes);
  out += '"';
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::Create(std::vector<Token> vocab,
                                                                     std::vector<Merge> merges,
                                                                     std::string source) {
  std::unique_ptr<Gpt2BpeTokenizer> t(new Gpt2BpeTokenizer());
  t->source_ = std::move(source);
  if (vocab.empty()) return InvalidArgumentError(t->source_ + ": the vocabulary is empty");

  int64_t max_id = -1;
  for (const Token& tok : vocab) {
    if (tok.id < 0 || tok.id >= std::numeric_limits<int32_t>::max()) {
      return InvalidArgumentError(t->source_ + ": token " + Quoted(tok.bytes) + " has id " +
                                  std::to_string(tok.id) + "; ids must be in [0, 2^31 - 1)");
    }
    max_id = std::max(max_id, tok.id);
  }
  // Tokens are stored in a table indexed by id, so the largest id sizes it.
  // Real vocabularies are dense (GPT-2: 0..50256); allow some holes, but never
  // let one stray id ("a": 2000000000) turn into a multi-gigabyte table.
  const int64_t id_limit = static_cast<int64_t>(vocab.size()) + kMaxIdHoles;
  if (max_id >= id_limit) {
    return InvalidArgumentError(t->source_ + ": the largest token id is " + std::to_string(max_id) +
                                " but there are only " + std::to_string(vocab.size()) +
                                " tokens; ids must be below " + std::to_string(id_limit) +
                                " (the token count + " + std::to_string(kMaxIdHoles) +
                                " unused ids). Renumber the vocabulary densely from 0.");
  }
  t->token_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  t->token_used_.assign(static_cast<size_t>(max_id + 1), false);
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(vocab.size());
  for (Token& tok : vocab) {
    const auto id = static_cast<int32_t>(tok.id);
    if (t->token_used_[id]) {
      return InvalidArgumentError(t->source_ + ": id " + std::to_string(id) + " is used by both " +
                                  Quoted(t->token_bytes_[id]) + " and " + Quoted(tok.bytes));
    }
    if (tok.bytes.empty()) {
      return InvalidArgumentError(t->source_ + ": token id " + std::to_string(id) + " is empty");
    }
    auto [it, inserted] = id_of.emplace(tok.bytes, id);
    if (!inserted) {
      return InvalidArgumentError(t->source_ + ": token " + Quoted(tok.bytes) +
                                  " appears twice (ids " + std::to_string(it->second) + " and " +
                                  std::to_string(id) + ")");
    }
    t->token_used_[id] = true;
    t->token_bytes_[id] = std::move(tok.bytes);
  }

  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end()) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      return InvalidArgumentError(t->source_ + ": no token for the single byte " + hex + " (" +
                                  Quoted(std::string(1, static_cast<char>(b))) +
                                  "); a byte-level BPE vocabulary needs all 256 bytes");
    }
    t->byte_token_[b] = it->second;
  }
  auto eot = id_of.find(std::string(kEndOfText));
  if (eot == id_of.end()) {
    return InvalidArgumentError(t->source_ +
                                ": no \"<|endoftext|>\" token; tierflow separates "
                                "documents with it, so the vocabulary must have one");
  }
  t->eot_token_ = eot->second;

  t->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    auto left = id_of.find(m.left);
    auto right = id_of.find(m.right);
    auto merged = id_of.find(m.left + m.right);
    const char* missing = left == id_of.end()     ? "its left token"
                          : right == id_of.end()  ? "its right token"
                          : merged == id_of.end() ? "the token it makes"
                                                  : nullptr;
    if (missing != nullptr) {
      return InvalidArgumentError(m.where + ": the merge " + Quoted(m.left) + " + " +
                                  Quoted(m.right) + ": " + missing + " is not in the vocabulary " +
                                  t->source_);
    }
    if (rank >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return InvalidArgumentError(m.where + ": more than 2^31 - 1 merges");
    }
    // A well-formed list never repeats a pair; if one does, its first (lowest)
    // rank wins (emplace keeps the existing entry).
    t->merges_.emplace(PairKey(left->second, right->second),
                       MergeInfo{static_cast<int32_t>(rank), merged->second});
  }
  return t;
}

std::vector<int32_t> Gpt2BpeTokenizer::Bpe(std::string_view piece) const {
  const int n = static_cast<int>(piece.size());
  std::vector<int32_t> id(n);
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    id[i] = byte_token_[static_cast<uint8_t>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;  // the left symbol's index; indices never move, dead symbols get id -1
    int32_t left;
    int32_t right;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  const auto push_pair = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(id[pos], id[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, id[pos], id[next[pos]]});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);

  // GPT-2 picks the lowest-ranked pair present and merges all its occurrences
  // left to right before looking again; popping one rank's whole batch in
  // position order does exactly that even when a merge creates a pair ranked
  // lower than the batch's.
  std::vector<Candidate> batch;
  while (!heap.empty()) {
    const int32_t rank = heap.top().rank;
    batch.clear();
    while (!heap.empty() && heap.top().rank == rank) {
      batch.push_back(heap.top());
      heap.pop();
    }
    for (const Candidate& c : batch) {
      const int j = next[c.pos];
      if (id[c.pos] != c.left || j < 0 || id[j] != c.right) continue;  // stale
      id[c.pos] = merges_.find(PairKey(c.left, c.right))->second.merged;
      next[c.pos] = next[j];
      if (next[j] >= 0) prev[next[j]] = c.pos;
      id[j] = -1;
      push_pair(prev[c.pos]);
      push_pair(c.pos);
    }
  }
  std::vector<int32_t> out;
  for (int i = 0; i >= 0 && i < n; i = next[i]) out.push_back(id[i]);
  return out;
}

std::vector<int32_t> Gpt2BpeTokenizer::EncodePiece(std::string_view piece) const {
  if (piece.empty()) return {};
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(piece));
    if (it != cache_.end()) return it->second;
  }
  std::vector<int32_t> tokens = Bpe(piece);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();  // bounded memory on huge corpora
  cache_.emplace(std::string(piece), tokens);
  return tokens;
}

StatusOr<std::vector<int32_t>> Gpt2BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() / 3);
  size_t offset_bytes = 0;
  while (offset_bytes <= text.size()) {
    const size_t special = text.find(kEndOfText, offset_bytes);
    const size_t end = special == std::string_view::npos ? text.size() : special;
    TF_ASSIGN_OR_RETURN(
        auto pieces, SplitGpt2Pieces(text.substr(offset_bytes, end - offset_bytes), offset_bytes));
    for (size_t i = 0; i < pieces.size(); ++i) {
      // A large corpus takes minutes: a signal must not wait for the end.
      if (i % 4096 == 0 && CancelRequested()) TF_RETURN_IF_ERROR(CheckCancel("tokenizing text"));
      std::vector<int32_t> ids = EncodePiece(pieces[i]);
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    }
    if (special == std::string_view::npos) break;
    tokens.push_back(eot_token_);
    offset_bytes = special + kEndOfText.size();
  }
  return tokens;
}

std::string Gpt2BpeTokenizer::Decode(std::span<const int32_t> tokens) const {
  std::string text;
  for (int32_t t : tokens) {
    if (t >= 0 && t < vocab_size() && token_used_[t]) {
      text += token_bytes_[t];
    } else {
      text += "\xEF\xBF\xBD";  // U+FFFD: not a token of this vocabulary
    }
  }
  return text;
}

std::string Gpt2BpeTokenizer::Describe() const {
  return "gpt2-bpe (" + std::to_string(vocab_size()) + " tokens, " +
         std::to_string(merges_.size()) + " merges, " + source_ + ")";
}

}  // namespace tierflow

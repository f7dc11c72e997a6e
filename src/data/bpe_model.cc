// BpeModel: vocabulary checks, byte fallback, and the rank-ordered merge loop.
#include "data/bpe_model.h"

#include <cstdio>
#include <limits>
#include <queue>

#include <nlohmann/json.hpp>

#include "data/hf_component.h"
#include "data/unicode_class.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

// How many ids below the largest one may be unused: a stray huge id must not
// size a multi-gigabyte table.
constexpr int64_t kMaxIdHoles = 65536;

// U+2581, SentencePiece's stand-in for a space.
constexpr std::string_view kMetaspace = "\xE2\x96\x81";

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string ByteTokenText(int b) {
  char text[8];
  std::snprintf(text, sizeof(text), "<0x%02X>", b);
  return text;
}

std::string CodePointName(char32_t cp) {
  char text[16];
  std::snprintf(text, sizeof(text), "U+%04X", static_cast<unsigned>(cp));
  return text;
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    const std::vector<std::pair<std::string, int64_t>>& vocab,
    std::vector<std::pair<std::string, std::string>> merges, Options options, std::string source) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->source_ = std::move(source);
  m->options_ = std::move(options);
  if (vocab.empty()) return InvalidArgumentError(m->source_ + ": model.vocab is empty");
  int64_t max_id = -1;
  for (const auto& [text, id] : vocab) {
    if (id < 0 || id >= std::numeric_limits<int32_t>::max()) {
      return InvalidArgumentError(m->source_ + ": token \"" + text + "\" has id " +
                                  std::to_string(id) + "; ids must be in [0, 2^31 - 1)");
    }
    max_id = std::max(max_id, id);
  }
  const int64_t id_limit = static_cast<int64_t>(vocab.size()) + kMaxIdHoles;
  if (max_id >= id_limit) {
    return InvalidArgumentError(m->source_ + ": the largest token id is " + std::to_string(max_id) +
                                " but there are only " + std::to_string(vocab.size()) +
                                " tokens; ids must be below " + std::to_string(id_limit) +
                                ". Renumber the vocabulary densely.");
  }
  m->id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  m->id_used_.assign(static_cast<size_t>(max_id + 1), false);
  m->vocab_.reserve(vocab.size());
  for (const auto& [text, id64] : vocab) {
    const auto id = static_cast<int32_t>(id64);
    if (m->id_used_[id]) {
      return InvalidArgumentError(m->source_ + ": id " + std::to_string(id) +
                                  " is used by both \"" + m->id_to_token_[id] + "\" and \"" + text +
                                  "\"");
    }
    auto [it, inserted] = m->vocab_.emplace(text, id);
    if (!inserted) {
      return InvalidArgumentError(m->source_ + ": token \"" + text + "\" appears twice (ids " +
                                  std::to_string(it->second) + " and " + std::to_string(id) + ")");
    }
    m->id_used_[id] = true;
    m->id_to_token_[id] = text;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = m->vocab_.find(ByteTokenText(b));
    m->byte_tokens_[b] = it == m->vocab_.end() ? -1 : it->second;
  }
  if (m->options_.unk_token) {
    auto it = m->vocab_.find(*m->options_.unk_token);
    if (it == m->vocab_.end()) {
      return InvalidArgumentError(m->source_ + ": model.unk_token \"" + *m->options_.unk_token +
                                  "\" is not in model.vocab");
    }
    m->unk_id_ = it->second;
  }
  m->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = m->vocab_.find(left);
    auto r = m->vocab_.find(right);
    auto merged = m->vocab_.find(left + right);
    const char* missing = l == m->vocab_.end()        ? "its left token"
                          : r == m->vocab_.end()      ? "its right token"
                          : merged == m->vocab_.end() ? "the token it makes"
                                                      : nullptr;
    if (missing != nullptr) {
      return InvalidArgumentError(m->source_ + ": model.merges[" + std::to_string(rank) + "] \"" +
                                  left + "\" + \"" + right + "\": " + missing +
                                  " is not in model.vocab");
    }
    if (rank >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return InvalidArgumentError(m->source_ + ": more than 2^31 - 1 merges");
    }
    // A repeated pair keeps its first (lowest) rank, as tokenizers does.
    m->merges_.emplace(PairKey(l->second, r->second),
                       MergeInfo{static_cast<int32_t>(rank), merged->second});
  }
  m->num_merges_ = static_cast<int64_t>(merges.size());
  // Words may be encoded apart when no token reaches across a word's start.
  m->split_at_metaspace_ = m->vocab_.count(std::string(kMetaspace)) > 0;
  for (const std::string& token : m->id_to_token_) {
    for (size_t at = token.find(kMetaspace, 1); at != std::string::npos && m->split_at_metaspace_;
         at = token.find(kMetaspace, at + 1)) {
      // "▁" after another character: only "▁▁..." runs are allowed.
      if (token.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0 ||
          at < kMetaspace.size()) {
        m->split_at_metaspace_ = false;
      }
    }
  }
  return m;
}

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model,
                                                       const JsonReader& reader) {
  const std::string path = "model";
  Options options;
  if (const Json* unk = JsonReader::Find(model, "unk_token")) {
    std::string text;
    TF_RETURN_IF_ERROR(reader.String(*unk, "model.unk_token", &text));
    options.unk_token = std::move(text);
  }
  TF_ASSIGN_OR_RETURN(options.byte_fallback,
                      OptionalBool(model, reader, path, "byte_fallback", false));
  TF_ASSIGN_OR_RETURN(options.fuse_unk, OptionalBool(model, reader, path, "fuse_unk", false));
  TF_ASSIGN_OR_RETURN(options.ignore_merges,
                      OptionalBool(model, reader, path, "ignore_merges", false));
  if (const Json* dropout = JsonReader::Find(model, "dropout")) {
    double p = 0;
    TF_RETURN_IF_ERROR(reader.Number(*dropout, "model.dropout", &p));
    if (p != 0) {
      return UnimplementedError(reader.label() +
                                ": model.dropout is set; BPE dropout (random merges) is a "
                                "training-time augmentation tierflow does not apply. Set it "
                                "to null.");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* affix = JsonReader::Find(model, key)) {
      std::string text;
      TF_RETURN_IF_ERROR(reader.String(*affix, std::string("model.") + key, &text));
      if (!text.empty()) {
        return UnimplementedError(reader.label() + ": model." + key + " is \"" + text +
                                  "\"; tierflow reads BPE models without one (Llama, Qwen, "
                                  "Mistral and GPT-2 have none)");
      }
    }
  }

  const Json* vocab_json = JsonReader::Find(model, "vocab");
  if (vocab_json == nullptr) return reader.Error("model.vocab", "is missing");
  TF_RETURN_IF_ERROR(reader.Object(*vocab_json, "model.vocab"));
  std::vector<std::pair<std::string, int64_t>> vocab;
  vocab.reserve(vocab_json->size());
  for (const auto& [text, id_json] : vocab_json->items()) {
    int64_t id = 0;
    TF_RETURN_IF_ERROR(reader.Int(id_json, "model.vocab[\"" + text + "\"]", 0,
                                  int64_t{std::numeric_limits<int32_t>::max()} - 1, &id));
    vocab.emplace_back(text, id);
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (const Json* list = JsonReader::Find(model, "merges")) {
    if (!list->is_array()) return reader.TypeError("model.merges", "an array", *list);
    merges.reserve(list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& item = (*list)[i];
      const std::string where = "model.merges[" + std::to_string(i) + "]";
      if (item.is_string()) {
        // "left right": exactly one space (tokens hold none; SentencePiece
        // conversions write spaces as "▁").
        const auto& line = item.get_ref<const std::string&>();
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          return reader.Error(
              where, "expected two tokens separated by one space, got " + JsonExcerpt(item));
        }
        merges.emplace_back(line.substr(0, space), line.substr(space + 1));
      } else if (item.is_array() && item.size() == 2 && item[0].is_string() &&
                 item[1].is_string()) {
        merges.emplace_back(item[0].get<std::string>(), item[1].get<std::string>());
      } else {
        return reader.TypeError(where, "\"left right\" or [\"left\", \"right\"]", item);
      }
    }
  }
  return Create(vocab, std::move(merges), std::move(options), reader.label());
}

const std::string* BpeModel::TokenText(int32_t id) const {
  if (id < 0 || id >= size() || !id_used_[id]) return nullptr;
  return &id_to_token_[id];
}

std::optional<int32_t> BpeModel::TokenId(std::string_view text) const {
  auto it = vocab_.find(std::string(text));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

Status BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(std::string(piece)); it != vocab_.end()) {
      out->push_back(it->second);
      return Status::Ok();
    }
  }
  // The initial symbols: one per character (or its byte tokens, or unk).
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  bool previous_unk = false;
  for (size_t pos = 0; pos < piece.size();) {
    char32_t cp = 0;
    const int len = data_internal::DecodeUtf8(piece, pos, &cp);
    const size_t n = len > 0 ? static_cast<size_t>(len) : 1;
    const std::string_view ch = piece.substr(pos, n);
    pos += n;
    if (auto it = vocab_.find(std::string(ch)); it != vocab_.end()) {
      ids.push_back(it->second);
      previous_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char b : ch) all = all && byte_tokens_[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        for (char b : ch) ids.push_back(byte_tokens_[static_cast<uint8_t>(b)]);
        previous_unk = false;
        continue;
      }
    }
    if (unk_id_ < 0) {
      return InvalidArgumentError(
          "the character " + CodePointName(cp) + " is not in " + source_ +
          "'s vocabulary, which has no unk_token and no byte fallback; remove the "
          "character from the text or use the model's own tokenizer");
    }
    if (!(options_.fuse_unk && previous_unk)) ids.push_back(unk_id_);
    previous_unk = true;
  }

  const int n = static_cast<int>(ids.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;  // the left symbol's index; indices never move, dead symbols get id -1
    int32_t merged;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  const auto push_pair = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(ids[pos], ids[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int j = c.pos >= 0 ? next[c.pos] : -1;
    if (ids[c.pos] < 0 || j < 0) continue;
    auto it = merges_.find(PairKey(ids[c.pos], ids[j]));
    if (it == merges_.end() || it->second.merged != c.merged) continue;  // stale
    ids[c.pos] = c.merged;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    ids[j] = -1;
    push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = next[i]) out->push_back(ids[i]);
  return Status::Ok();
}

Status BpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return Status::Ok();
  if (split_at_metaspace_ && piece.size() > kMaxCachedPieceBytes) {
    // Word by word: cut before each "▁" that follows another character.
    size_t begin = 0;
    for (size_t at = piece.find(kMetaspace, 1); at != std::string_view::npos;
         at = piece.find(kMetaspace, at + kMetaspace.size())) {
      if (piece.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0 &&
          at >= begin + kMetaspace.size()) {
        continue;  // inside a run of "▁"
      }
      TF_RETURN_IF_ERROR(EncodeWord(piece.substr(begin, at - begin), out));
      begin = at;
    }
    return EncodeWord(piece.substr(begin), out);
  }
  return EncodeWord(piece, out);
}

Status BpeModel::EncodeWord(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return Status::Ok();
  // Only short pieces are cached: a SentencePiece-style model's piece is a
  // whole document, which would fill the cache with text seen once.
  if (piece.size() > kMaxCachedPieceBytes) return Tokenize(piece, out);
  const std::string key(piece);
  CacheShard& shard = cache_[std::hash<std::string>{}(key) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return Status::Ok();
    }
  }
  std::vector<int32_t> tokens;
  TF_RETURN_IF_ERROR(Tokenize(piece, &tokens));
  out->insert(out->end(), tokens.begin(), tokens.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  // Bounded memory on huge corpora: a full shard starts over.
  if (shard.map.size() >= kMaxCacheEntriesPerShard) shard.map.clear();
  shard.map.emplace(key, std::move(tokens));
  return Status::Ok();
}

}  // namespace tierflow

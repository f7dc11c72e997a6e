// The pre-tokenizers of hf_pre_tokenizer.h.
#include "data/hf_pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/path_component.h"
#include "data/gpt2_byte_level.h"
#include "data/gpt2_pretokenize.h"
#include "data/hf_component.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;
using Range = std::pair<size_t, size_t>;

// `where` in each component names it in errors: "FILE: pre_tokenizer.pretokenizers[1]".
//
// ByteLevel writes a byte in at most 2 (a piece of n bytes in 2n + 2 with the
// prefix space), so checking after each piece bounds what was built.
class ByteLevel final : public HfPreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, std::string where)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), where_(std::move(where)) {}
  Status Apply(std::vector<TextPiece>* pieces, const GrowthLimit& limit) const override {
    std::vector<TextPiece> out;
    out.reserve(pieces->size());
    size_t total_bytes = 0;
    const auto add = [&](std::string text, bool at_start) -> Status {
      total_bytes += text.size();
      if (total_bytes > limit.max_bytes) return limit.Error(where_, "ByteLevel");
      out.push_back({std::move(text), at_start});
      return Status::Ok();
    };
    for (TextPiece& piece : *pieces) {
      if (add_prefix_space_ && (piece.text.empty() || piece.text[0] != ' ')) {
        piece.text.insert(piece.text.begin(), ' ');
      }
      if (!use_regex_) {
        if (!piece.text.empty()) {
          TF_RETURN_IF_ERROR(add(Gpt2BytesToVocabText(piece.text), piece.at_start));
        }
        continue;
      }
      TF_ASSIGN_OR_RETURN(auto parts, SplitGpt2Pieces(piece.text));
      for (size_t i = 0; i < parts.size(); ++i) {
        TF_RETURN_IF_ERROR(add(Gpt2BytesToVocabText(parts[i]), piece.at_start && i == 0));
      }
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::string where_;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` at `matches` (sorted, disjoint) with `behavior`, as tokenizers'
// NormalizedString::split does, returning the kept [begin, end) ranges.
std::vector<Range> SplitRanges(size_t size, const std::vector<Range>& matches, bool invert,
                               Behavior behavior) {
  std::vector<std::pair<Range, bool>> parts;  // (range, is_match), covering [0, size)
  size_t pos = 0;
  for (const Range& m : matches) {
    if (m.first > pos) parts.push_back({{pos, m.first}, invert});
    parts.push_back({m, !invert});
    pos = m.second;
  }
  if (pos < size) parts.push_back({{pos, size}, invert});

  std::vector<Range> kept;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& [range, is_match] : parts) {
        if (!is_match) kept.push_back(range);
      }
      break;
    case Behavior::kIsolated:
      for (const auto& part : parts) kept.push_back(part.first);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& [range, is_match] : parts) {
        if (is_match && !previous_match && !kept.empty()) {
          kept.back().second = range.second;
        } else {
          kept.push_back(range);
        }
        previous_match = is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous_match && !kept.empty()) {
          kept.back().first = it->first.first;
        } else {
          kept.push_back(it->first);
        }
        previous_match = it->second;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case Behavior::kContiguous: {
      int previous = -1;
      for (const auto& [range, is_match] : parts) {
        if (previous == static_cast<int>(is_match)) {
          kept.back().second = range.second;
        } else {
          kept.push_back(range);
        }
        previous = static_cast<int>(is_match);
      }
      break;
    }
  }
  return kept;
}

// Splits every piece at its matches of `find` (a callable returning the
// sorted match ranges of a string).
template <typename Find>
Status SplitPieces(std::vector<TextPiece>* pieces, bool invert, Behavior behavior, Find&& find) {
  std::vector<TextPiece> out;
  out.reserve(pieces->size());
  for (const TextPiece& piece : *pieces) {
    TF_ASSIGN_OR_RETURN(std::vector<Range> matches, find(piece.text));
    for (const Range& r : SplitRanges(piece.text.size(), matches, invert, behavior)) {
      if (r.second > r.first) {
        out.push_back(
            {piece.text.substr(r.first, r.second - r.first), piece.at_start && r.first == 0});
      }
    }
  }
  *pieces = std::move(out);
  return Status::Ok();
}

StatusOr<std::vector<Range>> LiteralMatches(std::string_view text, std::string_view literal) {
  std::vector<Range> out;
  if (literal.empty()) return out;
  for (size_t pos = text.find(literal); pos != std::string_view::npos;
       pos = text.find(literal, pos + literal.size())) {
    out.emplace_back(pos, pos + literal.size());
  }
  return out;
}

class Split final : public HfPreTokenizer {
 public:
  Split(HfPattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status Apply(std::vector<TextPiece>* pieces, const GrowthLimit&) const override {
    // Splitting only cuts and drops: the pieces never grow.
    return SplitPieces(pieces, invert_, behavior_,
                       [&](std::string_view text) -> StatusOr<std::vector<Range>> {
                         if (pattern_.regex) return pattern_.regex->FindAll(text);
                         return LiteralMatches(text, pattern_.literal);
                       });
  }

 private:
  HfPattern pattern_;
  Behavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

// Metaspace counts the bytes its replacement adds to a piece before building it.
class Metaspace final : public HfPreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split, std::string where)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        where_(std::move(where)) {}
  Status Apply(std::vector<TextPiece>* pieces, const GrowthLimit& limit) const override {
    size_t total_bytes = 0;
    for (TextPiece& piece : *pieces) {
      // Each space grows by the replacement less its own byte.
      const size_t spaces =
          static_cast<size_t>(std::count(piece.text.begin(), piece.text.end(), ' '));
      total_bytes += piece.text.size() + spaces * (replacement_.size() - 1);
      if (total_bytes > limit.max_bytes) return Grown(limit);
      piece.text = ReplaceAll(piece.text, " ", replacement_);
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && piece.text.compare(0, replacement_.size(), replacement_) != 0) {
        total_bytes += replacement_.size();
        if (total_bytes > limit.max_bytes) return Grown(limit);
        piece.text.insert(0, replacement_);
      }
    }
    if (!split_) {
      std::erase_if(*pieces, [](const TextPiece& p) { return p.text.empty(); });
      return Status::Ok();
    }
    return SplitPieces(pieces, false, Behavior::kMergedWithNext,
                       [&](std::string_view text) -> StatusOr<std::vector<Range>> {
                         return LiteralMatches(text, replacement_);
                       });
  }

 private:
  Status Grown(const GrowthLimit& limit) const {
    return limit.Error(where_, "Metaspace's replacement " + QuotedExcerpt(replacement_, 24));
  }

  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  std::string where_;
};

class Sequence final : public HfPreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfPreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  // Every step is bound by the limit of the Sequence's own input, so a chain
  // cannot compound what each step may add.
  Status Apply(std::vector<TextPiece>* pieces, const GrowthLimit& limit) const override {
    for (const auto& part : parts_) TF_RETURN_IF_ERROR(part->Apply(pieces, limit));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<HfPreTokenizer>> parts_;
};

constexpr const char* kSupported = "ByteLevel, Split, Metaspace, Sequence";

StatusOr<Behavior> ParseBehavior(const Json& spec, const JsonReader& reader,
                                 const std::string& path) {
  TF_ASSIGN_OR_RETURN(std::string name, RequiredString(spec, reader, path, "behavior"));
  static const std::pair<const char*, Behavior> kNames[] = {
      {"Removed", Behavior::kRemoved},
      {"Isolated", Behavior::kIsolated},
      {"MergedWithPrevious", Behavior::kMergedWithPrevious},
      {"MergedWithNext", Behavior::kMergedWithNext},
      {"Contiguous", Behavior::kContiguous}};
  for (const auto& [n, b] : kNames) {
    if (name == n) return b;
  }
  return reader.Error(path + ".behavior",
                      "\"" + name +
                          "\" is not one of Removed, Isolated, MergedWithPrevious, "
                          "MergedWithNext, Contiguous");
}

StatusOr<PrependScheme> ParsePrependScheme(const Json& spec, const JsonReader& reader,
                                           const std::string& path) {
  if (JsonReader::Find(spec, "prepend_scheme") == nullptr) {
    // Files written before tokenizers 0.14 say add_prefix_space instead.
    TF_ASSIGN_OR_RETURN(bool add, OptionalBool(spec, reader, path, "add_prefix_space", true));
    return add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  TF_ASSIGN_OR_RETURN(std::string name, RequiredString(spec, reader, path, "prepend_scheme"));
  if (name == "always") return PrependScheme::kAlways;
  if (name == "first") return PrependScheme::kFirst;
  if (name == "never") return PrependScheme::kNever;
  return reader.Error(path + ".prepend_scheme",
                      "\"" + name + "\" is not one of always, first, never");
}

}  // namespace

StatusOr<std::unique_ptr<HfPreTokenizer>> ParseHfPreTokenizer(const Json* spec,
                                                              const JsonReader& reader,
                                                              const std::string& path) {
  if (spec == nullptr) return std::unique_ptr<HfPreTokenizer>();
  TF_ASSIGN_OR_RETURN(std::string type, ComponentTypeOf(*spec, reader, path));
  const std::string where = reader.label() + ": " + path;
  if (type == "ByteLevel") {
    TF_ASSIGN_OR_RETURN(bool prefix, OptionalBool(*spec, reader, path, "add_prefix_space", true));
    TF_ASSIGN_OR_RETURN(bool regex, OptionalBool(*spec, reader, path, "use_regex", true));
    TF_RETURN_IF_ERROR(OptionalBool(*spec, reader, path, "trim_offsets", true).status());
    return std::unique_ptr<HfPreTokenizer>(std::make_unique<ByteLevel>(prefix, regex, where));
  }
  if (type == "Split") {
    TF_ASSIGN_OR_RETURN(HfPattern pattern, ParseHfPattern(*spec, reader, path));
    TF_ASSIGN_OR_RETURN(Behavior behavior, ParseBehavior(*spec, reader, path));
    TF_ASSIGN_OR_RETURN(bool invert, OptionalBool(*spec, reader, path, "invert", false));
    if (!pattern.regex && pattern.literal.empty()) {
      return reader.Error(path + ".pattern", "the pattern is empty");
    }
    return std::unique_ptr<HfPreTokenizer>(
        std::make_unique<Split>(std::move(pattern), behavior, invert));
  }
  if (type == "Metaspace") {
    TF_ASSIGN_OR_RETURN(std::string replacement,
                        RequiredString(*spec, reader, path, "replacement"));
    if (replacement.empty()) return reader.Error(path + ".replacement", "is empty");
    TF_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(*spec, reader, path));
    TF_ASSIGN_OR_RETURN(bool split, OptionalBool(*spec, reader, path, "split", true));
    return std::unique_ptr<HfPreTokenizer>(
        std::make_unique<Metaspace>(std::move(replacement), scheme, split, where));
  }
  if (type == "Sequence") {
    TF_ASSIGN_OR_RETURN(const Json* list, RequiredArray(*spec, reader, path, "pretokenizers"));
    std::vector<std::unique_ptr<HfPreTokenizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item = path + ".pretokenizers[" + std::to_string(i) + "]";
      TF_ASSIGN_OR_RETURN(auto part, ParseHfPreTokenizer(&(*list)[i], reader, item));
      if (part == nullptr) return reader.Error(item, "a Sequence entry may not be null");
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<HfPreTokenizer>(std::make_unique<Sequence>(std::move(parts)));
  }
  return UnsupportedComponent(reader, path, "pre_tokenizer", type, kSupported);
}

}  // namespace tierflow

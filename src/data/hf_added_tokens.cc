// Added-token parsing and leftmost-longest matching.
#include "data/hf_added_tokens.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/hf_component.h"
#include "data/unicode_class.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

// Whether a word character ends text[..pos) / starts text[pos..).
bool WordBefore(std::string_view text, size_t pos) {
  if (pos == 0) return false;
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  char32_t cp = 0;
  return data_internal::DecodeUtf8(text, start, &cp) > 0 && data_internal::IsWordCodePoint(cp);
}
bool WordAfter(std::string_view text, size_t pos) {
  char32_t cp = 0;
  return pos < text.size() && data_internal::DecodeUtf8(text, pos, &cp) > 0 &&
         data_internal::IsWordCodePoint(cp);
}

}  // namespace

StatusOr<std::vector<AddedToken>> ParseHfAddedTokens(const Json* list, const JsonReader& reader) {
  std::vector<AddedToken> out;
  if (list == nullptr) return out;
  if (!list->is_array()) return reader.TypeError("added_tokens", "an array", *list);
  std::set<std::string> contents;
  std::set<int64_t> ids;
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& item = (*list)[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    TF_RETURN_IF_ERROR(reader.Object(item, path));
    AddedToken t;
    const Json* id = JsonReader::Find(item, "id");
    if (id == nullptr) return reader.Error(path + ".id", "is missing");
    int64_t id64 = 0;
    TF_RETURN_IF_ERROR(
        reader.Int(*id, path + ".id", 0, int64_t{std::numeric_limits<int32_t>::max()} - 1, &id64));
    t.id = static_cast<int32_t>(id64);
    TF_ASSIGN_OR_RETURN(t.content, RequiredString(item, reader, path, "content"));
    if (t.content.empty()) return reader.Error(path + ".content", "is empty");
    if (data_internal::FindInvalidUtf8(t.content) != std::string::npos) {
      return reader.Error(path + ".content", "is not valid UTF-8");
    }
    TF_ASSIGN_OR_RETURN(t.special, OptionalBool(item, reader, path, "special", false));
    TF_ASSIGN_OR_RETURN(t.normalized, OptionalBool(item, reader, path, "normalized", !t.special));
    TF_ASSIGN_OR_RETURN(t.lstrip, OptionalBool(item, reader, path, "lstrip", false));
    TF_ASSIGN_OR_RETURN(t.rstrip, OptionalBool(item, reader, path, "rstrip", false));
    TF_ASSIGN_OR_RETURN(t.single_word, OptionalBool(item, reader, path, "single_word", false));
    if (!contents.insert(t.content).second) {
      return reader.Error(path, "the content \"" + t.content + "\" is listed twice");
    }
    if (!ids.insert(t.id).second) {
      return reader.Error(path, "the id " + std::to_string(t.id) + " is listed twice");
    }
    out.push_back(std::move(t));
  }
  return out;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  std::vector<std::string_view> contents;
  contents.reserve(tokens_.size());
  for (const AddedToken& t : tokens_) contents.push_back(t.content);
  finder_ = LongestMatchFinder(contents);
}

std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text, uint64_t* steps) const {
  std::vector<TextSegment> out;
  const std::vector<LongestMatchFinder::Match> candidates = finder_.FindLongestAt(text, steps);
  size_t next = 0;         // the first candidate not inside a match taken
  size_t plain_begin = 0;  // start of the pending plain text
  while (next < candidates.size()) {
    // The text up to the next candidate is plain.
    const size_t pos = candidates[next].begin;
    const AddedToken& match = tokens_[candidates[next].string];
    ++next;
    if (match.single_word &&
        (WordBefore(text, pos) || WordAfter(text, pos + match.content.size()))) {
      continue;  // plain text here; the next position may still match
    }
    size_t begin = pos;
    size_t end = pos + match.content.size();
    if (match.lstrip) {
      // Only the pending plain text is swallowed, and only it is scanned: a
      // scan back through earlier matches made a run of lstrip tokens
      // quadratic.
      begin = plain_begin +
              data_internal::SkipSpaceBackward(text.substr(plain_begin), begin - plain_begin);
    }
    if (match.rstrip) end = data_internal::SkipSpaceForward(text, end);
    if (begin > plain_begin) out.push_back({plain_begin, begin, -1});
    out.push_back({begin, end, match.id});
    plain_begin = end;
    while (next < candidates.size() && candidates[next].begin < end) ++next;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
  return out;
}

}  // namespace tierflow

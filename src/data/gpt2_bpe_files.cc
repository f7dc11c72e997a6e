// Gpt2BpeTokenizer's file loader: vocab.json + merges.txt.
//
// They write tokens in GPT-2's byte-level alphabet; they are turned
// into raw bytes here, so the tokenizer itself only sees bytes. Every
// malformation is an InvalidArgument naming the file and the entry or line.
#include <utility>

#include <nlohmann/json.hpp>

#include "data/gpt2_bpe_tokenizer.h"
#include "data/gpt2_byte_level.h"
#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

// Depth-limited (tokenizer.json nests ~6 levels; a deep one would overflow
// the stack). Duplicate keys stay lenient, last wins, as in Python's json,
// which wrote and reads these files.
StatusOr<Json> ParseTokenizerJson(std::string_view text, const std::string& name) {
  JsonParseOptions options;
  options.reject_duplicate_keys = false;
  Json out;
  if (Status parsed = ParseJson(text, name, options, &out); !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  return out;
}

// vocab.json's object, or tokenizer.json's model.vocab: token text -> id.
StatusOr<std::vector<Gpt2BpeTokenizer::Token>> ParseVocabObject(const Json& vocab,
                                                                const std::string& name) {
  if (!vocab.is_object()) {
    return InvalidArgumentError(name + ": the vocabulary must be a JSON object of token -> id");
  }
  std::vector<Gpt2BpeTokenizer::Token> tokens;
  tokens.reserve(vocab.size());
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer()) {
      return InvalidArgumentError(name + ": the id of token \"" + key + "\" is " +
                                  JsonExcerpt(value) + ", not an integer");
    }
    // An unsigned id above INT64_MAX would wrap in get<int64_t>(): refused as written.
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT32_MAX}) {
      return InvalidArgumentError(name + ": the id of token \"" + key + "\" is " +
                                  JsonExcerpt(value) + "; ids must be in [0, 2^31 - 1)");
    }
    auto bytes = Gpt2VocabTextToBytes(key);
    if (!bytes.ok()) {
      return InvalidArgumentError(name + ": token \"" + key + "\" " + bytes.status().message());
    }
    tokens.push_back({std::move(bytes).value(), value.get<int64_t>()});
  }
  return tokens;
}

StatusOr<Gpt2BpeTokenizer::Merge> MergeFromParts(std::string_view left, std::string_view right,
                                                 std::string where) {
  auto l = Gpt2VocabTextToBytes(left);
  if (!l.ok())
    return InvalidArgumentError(where + ": \"" + std::string(left) + "\" " + l.status().message());
  auto r = Gpt2VocabTextToBytes(right);
  if (!r.ok())
    return InvalidArgumentError(where + ": \"" + std::string(right) + "\" " + r.status().message());
  return Gpt2BpeTokenizer::Merge{std::move(l).value(), std::move(r).value(), std::move(where)};
}

// "left right" with exactly one space: byte-level tokens never hold U+0020.
StatusOr<Gpt2BpeTokenizer::Merge> ParseMergeLine(std::string_view line, std::string where) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return InvalidArgumentError(where + ": expected two tokens separated by one space, got \"" +
                                std::string(line) + "\"");
  }
  return MergeFromParts(line.substr(0, space), line.substr(space + 1), std::move(where));
}

StatusOr<std::vector<Gpt2BpeTokenizer::Merge>> ParseMergesText(std::string_view text,
                                                               const std::string& name) {
  std::vector<Gpt2BpeTokenizer::Merge> merges;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    TF_ASSIGN_OR_RETURN(auto merge,
                        ParseMergeLine(line, name + " line " + std::to_string(line_number)));
    merges.push_back(std::move(merge));
  }
  return merges;
}

}  // namespace

StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::FromVocabAndMergesText(
    std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
    const std::string& merges_name) {
  TF_ASSIGN_OR_RETURN(Json vocab, ParseTokenizerJson(vocab_json, vocab_name));
  TF_ASSIGN_OR_RETURN(auto tokens, ParseVocabObject(vocab, vocab_name));
  TF_ASSIGN_OR_RETURN(auto merges, ParseMergesText(merges_txt, merges_name));
  return Create(std::move(tokens), std::move(merges), vocab_name);
}

StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::FromVocabAndMerges(
    const std::string& vocab_json_path, const std::string& merges_txt_path) {
  TF_ASSIGN_OR_RETURN(std::string vocab, ReadFileToString(vocab_json_path, kMaxTokenizerFileBytes));
  TF_ASSIGN_OR_RETURN(std::string merges,
                      ReadFileToString(merges_txt_path, kMaxTokenizerFileBytes));
  return FromVocabAndMergesText(vocab, merges, vocab_json_path, merges_txt_path);
}

}  // namespace tierflow

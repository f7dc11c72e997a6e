// Plain-text and JSONL readers, and the LoadTokens dispatcher.
#include "data/text_dataset.h"

#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "common/path_component.h"
#include "io/file_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string JsonTypeName(const nlohmann::json& j) { return j.type_name(); }

}  // namespace

StatusOr<TokenSource> TokenizeTextFile(const std::string& path, const Tokenizer& tokenizer,
                                       int32_t vocab_size) {
  TF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxTextDatasetBytes));
  if (text.empty()) return InvalidArgumentError(path + " is empty; there is nothing to train on");
  auto tokens = tokenizer.Encode(text);
  if (!tokens.ok()) return tokens.status().WithContext(path);
  return TokenSource::FromTokens(std::move(tokens).value(), path, vocab_size);
}

StatusOr<TokenSource> TokenizeJsonlFile(const std::string& path, const Tokenizer& tokenizer,
                                        std::string_view text_field, int32_t vocab_size) {
  TF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxTextDatasetBytes));
  if (text.empty()) return InvalidArgumentError(path + " is empty; there is nothing to train on");
  std::vector<int32_t> tokens;
  int64_t num_documents = 0;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    const std::string where = path + ":" + std::to_string(line_number);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;

    if (CancelRequested()) TF_RETURN_IF_ERROR(CheckCancel("tokenizing " + where));
    nlohmann::json doc;
    // Depth-limited: one line can nest deep enough to overflow the stack.
    // Duplicate keys lenient (last wins), as the Python tools writing JSONL.
    JsonParseOptions options;
    options.reject_duplicate_keys = false;
    if (Status parsed = ParseJson(line, where, options, &doc); !parsed.ok()) {
      return InvalidArgumentError(parsed.message());
    }
    if (!doc.is_object()) {
      return InvalidArgumentError(where + ": expected a JSON object with a \"" +
                                  std::string(text_field) + "\" field, got a " + JsonTypeName(doc));
    }
    auto field = doc.find(std::string(text_field));
    if (field == doc.end()) {
      std::string keys;
      size_t listed = 0;
      for (const auto& [key, value] : doc.items()) {
        if (++listed > 16) {
          keys += ", ...";
          break;
        }
        keys += (keys.empty() ? "" : ", ") + QuotedExcerpt(key, 32);
      }
      return InvalidArgumentError(where + ": no \"" + std::string(text_field) +
                                  "\" field (it has: " + (keys.empty() ? "no fields" : keys) +
                                  "); name the text field with --text-field");
    }
    if (!field->is_string()) {
      return InvalidArgumentError(where + ": \"" + std::string(text_field) + "\" is a " +
                                  JsonTypeName(*field) + ", not a string");
    }
    auto doc_tokens = tokenizer.Encode(field->get_ref<const std::string&>());
    if (!doc_tokens.ok()) {
      return doc_tokens.status().WithContext(where + ": field \"" + std::string(text_field) + "\"");
    }
    tokens.push_back(tokenizer.eot_token());
    tokens.insert(tokens.end(), doc_tokens->begin(), doc_tokens->end());
    ++num_documents;
  }
  if (num_documents == 0)
    return InvalidArgumentError(path + " has no documents (only blank lines)");
  return TokenSource::FromTokens(std::move(tokens), path, vocab_size);
}

StatusOr<DataFormat> ParseDataFormat(std::string_view name) {
  if (name == "auto") return DataFormat::kAuto;
  if (name == "text") return DataFormat::kText;
  if (name == "jsonl") return DataFormat::kJsonl;
  if (name == "tokens") return DataFormat::kTokens;
  return InvalidArgumentError("unknown data format \"" + std::string(name) +
                              "\": use auto, text, jsonl or tokens");
}

DataFormat DataFormatForPath(std::string_view path) {
  if (EndsWith(path, ".jsonl")) return DataFormat::kJsonl;
  if (EndsWith(path, ".bin") || EndsWith(path, ".tok")) return DataFormat::kTokens;
  return DataFormat::kText;
}

StatusOr<TokenSource> LoadTokens(const DatasetOptions& options, const Tokenizer* tokenizer) {
  const DataFormat format =
      options.format == DataFormat::kAuto ? DataFormatForPath(options.path) : options.format;
  if (format == DataFormat::kTokens) {
    return OpenTokenFile(options.path, options.token_dtype, options.vocab_size);
  }
  if (tokenizer == nullptr) {
    return InvalidArgumentError(options.path + " is text; a tokenizer is needed to read it");
  }
  if (format == DataFormat::kJsonl) {
    return TokenizeJsonlFile(options.path, *tokenizer, options.text_field, options.vocab_size);
  }
  return TokenizeTextFile(options.path, *tokenizer, options.vocab_size);
}

}  // namespace tierflow

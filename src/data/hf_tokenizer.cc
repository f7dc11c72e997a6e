// HfTokenizer: loading tokenizer.json, the encode pipeline, decoding.
#include "data/hf_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "data/file_util.h"
#include "data/hf_component.h"
#include "data/unicode_class.h"
#include "io/file_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxTokenizerConfigBytes = size_t{16} << 20;

// The post-processor's tokens around a single sequence.
struct Template {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

Status ParsePostProcessor(const Json* spec, const JsonReader& reader, const std::string& path,
                          Template* out) {
  if (spec == nullptr) return Status::Ok();
  TF_ASSIGN_OR_RETURN(std::string type, ComponentTypeOf(*spec, reader, path));
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "Sequence") {
    TF_ASSIGN_OR_RETURN(const Json* list, RequiredArray(*spec, reader, path, "processors"));
    for (size_t i = 0; i < list->size(); ++i) {
      TF_RETURN_IF_ERROR(ParsePostProcessor(&(*list)[i], reader,
                                            path + ".processors[" + std::to_string(i) + "]", out));
    }
    return Status::Ok();
  }
  if (type == "TemplateProcessing") {
    TF_ASSIGN_OR_RETURN(const Json* single, RequiredArray(*spec, reader, path, "single"));
    const Json* specials = JsonReader::Find(*spec, "special_tokens");
    bool seen_sequence = false;
    Template t;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& item = (*single)[i];
      const std::string item_path = path + ".single[" + std::to_string(i) + "]";
      if (JsonReader::Find(item, "Sequence") != nullptr) {
        seen_sequence = true;
        continue;
      }
      const Json* special = JsonReader::Find(item, "SpecialToken");
      if (special == nullptr) {
        return reader.TypeError(item_path, "{\"Sequence\": ...} or {\"SpecialToken\": ...}", item);
      }
      TF_ASSIGN_OR_RETURN(std::string name,
                          RequiredString(*special, reader, item_path + ".SpecialToken", "id"));
      const Json* entry = specials != nullptr ? JsonReader::Find(*specials, name) : nullptr;
      if (entry == nullptr) {
        return reader.Error(path + ".special_tokens", "has no entry for \"" + name + "\"");
      }
      TF_ASSIGN_OR_RETURN(const Json* ids,
                          RequiredArray(*entry, reader, path + ".special_tokens." + name, "ids"));
      for (size_t k = 0; k < ids->size(); ++k) {
        int64_t id = 0;
        TF_RETURN_IF_ERROR(reader.Int((*ids)[k], path + ".special_tokens." + name + ".ids", 0,
                                      INT32_MAX - 1, &id));
        (seen_sequence ? t.suffix : t.prefix).push_back(static_cast<int32_t>(id));
      }
    }
    if (!seen_sequence) return reader.Error(path + ".single", "has no {\"Sequence\": ...} item");
    out->prefix.insert(out->prefix.end(), t.prefix.begin(), t.prefix.end());
    out->suffix.insert(out->suffix.end(), t.suffix.begin(), t.suffix.end());
    return Status::Ok();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json* pair = JsonReader::Find(*spec, key);
      int64_t id = 0;
      if (pair == nullptr || !pair->is_array() || pair->size() != 2) {
        return reader.Error(path + "." + key, "expected [token, id]");
      }
      TF_RETURN_IF_ERROR(reader.Int((*pair)[1], path + "." + key + "[1]", 0, INT32_MAX - 1, &id));
      (std::string(key) == "cls" ? out->prefix : out->suffix).push_back(static_cast<int32_t>(id));
    }
    return Status::Ok();
  }
  return UnsupportedComponent(reader, path, "post_processor", type,
                              "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, "
                              "Sequence");
}

}  // namespace

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(std::string_view tokenizer_json,
                                                           const std::string& name,
                                                           const HfTokenizerConfig* config) {
  JsonParseOptions parse_options;
  parse_options.reject_duplicate_keys = false;  // Python wrote it; last wins, as Python reads it
  Json root;
  if (Status parsed = ParseJson(tokenizer_json, name, parse_options, &root); !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  const JsonReader reader(name);
  const Json* model = JsonReader::Find(root, "model");
  if (model == nullptr || !model->is_object()) {
    return InvalidArgumentError(name +
                                ": no \"model\" object; is this a Hugging Face tokenizer.json?");
  }
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->name_ = name;
  std::string model_type = "BPE";
  if (const Json* type = JsonReader::Find(*model, "type")) {
    TF_RETURN_IF_ERROR(reader.String(*type, "model.type", &model_type));
  }
  if (model_type != "BPE") {
    return UnimplementedError(name + ": model.type is \"" + model_type +
                              "\"; tierflow reads BPE tokenizers (GPT-2, Llama 2/3, Qwen2, "
                              "Mistral), not WordPiece, Unigram or WordLevel ones");
  }
  TF_ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(*model, reader));
  TF_ASSIGN_OR_RETURN(t->normalizer_, ParseHfNormalizer(JsonReader::Find(root, "normalizer"),
                                                        reader, "normalizer"));
  TF_ASSIGN_OR_RETURN(
      t->pre_tokenizer_,
      ParseHfPreTokenizer(JsonReader::Find(root, "pre_tokenizer"), reader, "pre_tokenizer"));
  TF_ASSIGN_OR_RETURN(t->decoder_,
                      ParseHfDecoder(JsonReader::Find(root, "decoder"), reader, "decoder"));
  TF_ASSIGN_OR_RETURN(t->added_,
                      ParseHfAddedTokens(JsonReader::Find(root, "added_tokens"), reader));
  Template tmpl;
  TF_RETURN_IF_ERROR(ParsePostProcessor(JsonReader::Find(root, "post_processor"), reader,
                                        "post_processor", &tmpl));

  int32_t size = t->model_->size();
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& a : t->added_) {
    // An added token may reuse a vocabulary id with other text; decoding
    // follows the added token, as in tokenizers.
    t->added_text_[a.id] = a.content;
    size = std::max(size, a.id + 1);
    (a.normalized ? normalized : raw).push_back(a);
  }
  t->vocab_size_ = size;
  t->raw_matcher_ = AddedTokenMatcher(std::move(raw));
  t->normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  for (int32_t id : tmpl.prefix) {
    if (id >= size)
      return reader.Error("post_processor",
                          "adds token id " + std::to_string(id) + ", outside the vocabulary");
  }
  for (int32_t id : tmpl.suffix) {
    if (id >= size)
      return reader.Error("post_processor",
                          "adds token id " + std::to_string(id) + ", outside the vocabulary");
  }

  // BOS/EOS: tokenizer_config.json names them; without it, the post-processor's
  // first added token is the BOS.
  const auto resolve = [&](const std::optional<std::string>& text,
                           const char* field) -> StatusOr<std::optional<int32_t>> {
    if (!text) return std::optional<int32_t>();
    std::optional<int32_t> id = t->TokenId(*text);
    if (!id) {
      return InvalidArgumentError(name + ": tokenizer_config.json's " + field + " \"" + *text +
                                  "\" is not a token of this tokenizer");
    }
    return id;
  };
  if (config != nullptr) {
    TF_ASSIGN_OR_RETURN(t->bos_token_, resolve(config->bos_token, "bos_token"));
    TF_ASSIGN_OR_RETURN(t->eos_token_, resolve(config->eos_token, "eos_token"));
    t->chat_template_ = config->chat_template;
    if (config->add_bos_token) {
      tmpl.prefix.clear();
      if (*config->add_bos_token) {
        if (!t->bos_token_) {
          return InvalidArgumentError(name +
                                      ": tokenizer_config.json sets add_bos_token but names "
                                      "no bos_token");
        }
        tmpl.prefix.push_back(*t->bos_token_);
      }
    }
    if (config->add_eos_token) {
      tmpl.suffix.clear();
      if (*config->add_eos_token) {
        if (!t->eos_token_) {
          return InvalidArgumentError(name +
                                      ": tokenizer_config.json sets add_eos_token but names "
                                      "no eos_token");
        }
        tmpl.suffix.push_back(*t->eos_token_);
      }
    }
  }
  if (!t->bos_token_ && !tmpl.prefix.empty()) t->bos_token_ = tmpl.prefix.front();
  t->prefix_ = std::move(tmpl.prefix);
  t->suffix_ = std::move(tmpl.suffix);

  if (!t->prefix_.empty()) {
    t->eot_token_ = t->prefix_.front();
  } else if (auto eot = t->TokenId(kEndOfText)) {
    t->eot_token_ = *eot;
  } else if (t->eos_token_) {
    t->eot_token_ = *t->eos_token_;
  } else {
    return InvalidArgumentError(
        name +
        ": no document separator: the tokenizer adds no BOS token, has no \"<|endoftext|>\" and "
        "names no eos_token (put tokenizer_config.json with an eos_token beside it)");
  }
  return t;
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromFile(const std::string& path) {
  TF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxTokenizerFileBytes));
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::optional<HfTokenizerConfig> config;
  if (IsRegularFile(dir + "tokenizer_config.json")) {
    TF_ASSIGN_OR_RETURN(std::string config_text,
                        ReadFileToString(dir + "tokenizer_config.json", kMaxTokenizerConfigBytes));
    TF_ASSIGN_OR_RETURN(config, ParseHfTokenizerConfig(config_text, dir + "tokenizer_config.json"));
  }
  if (IsRegularFile(dir + "chat_template.jinja")) {
    if (!config) config.emplace();
    TF_ASSIGN_OR_RETURN(config->chat_template,
                        ReadFileToString(dir + "chat_template.jinja", kMaxTokenizerConfigBytes));
  }
  return Create(text, path, config ? &*config : nullptr);
}

std::optional<int32_t> HfTokenizer::TokenId(std::string_view text) const {
  for (const auto& [id, content] : added_text_) {
    if (content == text) return id;
  }
  return model_->TokenId(text);
}

Status HfTokenizer::EncodePlain(std::string_view text, bool at_start,
                                std::vector<int32_t>* out) const {
  std::string normalized(text);
  if (normalizer_ != nullptr) {
    TF_ASSIGN_OR_RETURN(normalized, normalizer_->Apply(std::move(normalized)));
  }
  for (const TextSegment& seg : normalized_matcher_.Split(normalized)) {
    if (seg.token >= 0) {
      out->push_back(seg.token);
      continue;
    }
    std::vector<TextPiece> pieces{
        {normalized.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0}};
    if (pre_tokenizer_ != nullptr) {
      TF_RETURN_IF_ERROR(pre_tokenizer_->Apply(&pieces, GrowthLimit::For(seg.end - seg.begin)));
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      // A large corpus takes minutes: a signal must not wait for the end.
      if (i % 4096 == 4095 && CancelRequested()) {
        TF_RETURN_IF_ERROR(CheckCancel("tokenizing text"));
      }
      TF_RETURN_IF_ERROR(model_->Encode(pieces[i].text, out));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text) const {
  return EncodeAt(text, true);
}

StatusOr<std::vector<int32_t>> HfTokenizer::EncodeContinuation(std::string_view text) const {
  return EncodeAt(text, false);
}

StatusOr<std::vector<int32_t>> HfTokenizer::EncodeAt(std::string_view text, bool at_start) const {
  if (const size_t bad = data_internal::FindInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgumentError("the text is not valid UTF-8 at byte offset " +
                                std::to_string(bad));
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  for (const TextSegment& seg : raw_matcher_.Split(text)) {
    if (seg.token >= 0) {
      out.push_back(seg.token);
      continue;
    }
    TF_RETURN_IF_ERROR(
        EncodePlain(text.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0, &out));
  }
  return out;
}

StatusOr<std::vector<int32_t>> HfTokenizer::EncodeWithSpecialTokens(std::string_view text) const {
  TF_ASSIGN_OR_RETURN(std::vector<int32_t> body, Encode(text));
  std::vector<int32_t> out = prefix_;
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string HfTokenizer::Decode(std::span<const int32_t> tokens) const {
  std::vector<std::string> texts;
  texts.reserve(tokens.size());
  for (int32_t id : tokens) {
    if (auto it = added_text_.find(id); it != added_text_.end()) {
      texts.push_back(it->second);
    } else if (const std::string* text = model_->TokenText(id)) {
      texts.push_back(*text);
    } else {
      texts.emplace_back("\xEF\xBF\xBD");  // U+FFFD: not a token of this vocabulary
    }
  }
  return DecodeTokenTexts(decoder_.get(), std::move(texts));
}

std::string HfTokenizer::Describe() const {
  return "hf-bpe (" + std::to_string(vocab_size_) + " tokens, " +
         std::to_string(model_->num_merges()) + " merges, " + std::to_string(added_.size()) +
         " added, " + (model_->byte_fallback() ? "byte fallback, " : "") + name_ + ")";
}

}  // namespace tierflow

// The decoders of hf_decoder.h.
#include "data/hf_decoder.h"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "data/gpt2_byte_level.h"
#include "data/hf_component.h"
#include "data/text_growth.h"
#include "data/unicode_class.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

class ByteLevel final : public HfDecoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      auto bytes = Gpt2VocabTextToBytes(token);
      if (bytes.ok()) token = *std::move(bytes);
    }
  }
};

class Replace final : public HfDecoder {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) token = ReplaceAll(token, from_, to_);
  }
  double MaxGrowth() const override {
    return std::max(1.0, static_cast<double>(to_.size()) / static_cast<double>(from_.size()));
  }

 private:
  std::string from_, to_;
};

// "<0xXX>" -> the byte, or -1.
int ByteTokenValue(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

class ByteFallback final : public HfDecoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t byte_tokens = 0;
    const auto flush = [&] {
      if (byte_tokens == 0) return;
      if (data_internal::FindInvalidUtf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < byte_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      byte_tokens = 0;
    };
    for (std::string& token : *tokens) {
      const int value = ByteTokenValue(token);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
        ++byte_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
  }
};

class Fuse final : public HfDecoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& token : *tokens) all += token;
    tokens->clear();
    tokens->push_back(std::move(all));
  }
};

class Strip final : public HfDecoder {
 public:
  Strip(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      size_t begin = 0, end = token.size();
      for (int i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0 &&
                      begin + content_.size() <= end;
           ++i) {
        begin += content_.size();
      }
      for (int i = 0; i < stop_ && end >= begin + content_.size() &&
                      token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class Metaspace final : public HfDecoder {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      // tokenizers (0.23) drops every replacement in the first token, not
      // only the leading one (its PR #2212 would change that); tierflow
      // decodes as the reference does.
      token = ReplaceAll(token, replacement_, i == 0 && strip_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class Sequence final : public HfDecoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfDecoder>> parts) : parts_(std::move(parts)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (const auto& part : parts_) part->Apply(tokens);
  }
  double MaxGrowth() const override {
    double growth = 1.0;
    for (const auto& part : parts_) growth *= part->MaxGrowth();
    return growth;
  }

 private:
  std::vector<std::unique_ptr<HfDecoder>> parts_;
};

constexpr const char* kSupported =
    "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence";

Status GrowthError(const JsonReader& reader, const std::string& path, double growth) {
  return reader.Error(
      path, "the decoder's Replace steps up to here may lengthen decoded text " +
                std::to_string(static_cast<int64_t>(growth)) + " times; tierflow allows " +
                std::to_string(kMaxTextGrowth) +
                " (the released decoders shorten it). Shorten the Replace contents, or remove "
                "the steps that lengthen what earlier steps already lengthened");
}

}  // namespace

StatusOr<std::unique_ptr<HfDecoder>> ParseHfDecoder(const Json* spec, const JsonReader& reader,
                                                    const std::string& path) {
  if (spec == nullptr) return std::unique_ptr<HfDecoder>();
  TF_ASSIGN_OR_RETURN(std::string type, ComponentTypeOf(*spec, reader, path));
  if (type == "ByteLevel") return std::unique_ptr<HfDecoder>(std::make_unique<ByteLevel>());
  if (type == "ByteFallback") return std::unique_ptr<HfDecoder>(std::make_unique<ByteFallback>());
  if (type == "Fuse") return std::unique_ptr<HfDecoder>(std::make_unique<Fuse>());
  if (type == "Replace") {
    TF_ASSIGN_OR_RETURN(HfPattern pattern, ParseHfPattern(*spec, reader, path));
    if (pattern.regex || pattern.literal.empty()) {
      return UnimplementedError(reader.label() + ": " + path +
                                ": a Replace decoder needs a non-empty {\"String\": ...} pattern");
    }
    TF_ASSIGN_OR_RETURN(std::string content, RequiredString(*spec, reader, path, "content"));
    auto replace = std::make_unique<Replace>(std::move(pattern.literal), std::move(content));
    if (replace->MaxGrowth() > kMaxTextGrowth) {
      return GrowthError(reader, path, replace->MaxGrowth());
    }
    return std::unique_ptr<HfDecoder>(std::move(replace));
  }
  if (type == "Strip") {
    TF_ASSIGN_OR_RETURN(std::string content, RequiredString(*spec, reader, path, "content"));
    if (content.empty()) return reader.Error(path + ".content", "is empty");
    int64_t start = 0, stop = 0;
    if (const Json* v = JsonReader::Find(*spec, "start")) {
      TF_RETURN_IF_ERROR(reader.Int(*v, path + ".start", 0, 1 << 20, &start));
    }
    if (const Json* v = JsonReader::Find(*spec, "stop")) {
      TF_RETURN_IF_ERROR(reader.Int(*v, path + ".stop", 0, 1 << 20, &stop));
    }
    return std::unique_ptr<HfDecoder>(std::make_unique<Strip>(
        std::move(content), static_cast<int>(start), static_cast<int>(stop)));
  }
  if (type == "Metaspace") {
    TF_ASSIGN_OR_RETURN(std::string replacement,
                        RequiredString(*spec, reader, path, "replacement"));
    if (replacement.empty()) return reader.Error(path + ".replacement", "is empty");
    bool strip_first = true;
    if (const Json* scheme = JsonReader::Find(*spec, "prepend_scheme")) {
      std::string name;
      TF_RETURN_IF_ERROR(reader.String(*scheme, path + ".prepend_scheme", &name));
      strip_first = name != "never";
    } else {
      TF_ASSIGN_OR_RETURN(strip_first, OptionalBool(*spec, reader, path, "add_prefix_space", true));
    }
    return std::unique_ptr<HfDecoder>(
        std::make_unique<Metaspace>(std::move(replacement), strip_first));
  }
  if (type == "Sequence") {
    TF_ASSIGN_OR_RETURN(const Json* list, RequiredArray(*spec, reader, path, "decoders"));
    std::vector<std::unique_ptr<HfDecoder>> parts;
    double growth = 1.0;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item = path + ".decoders[" + std::to_string(i) + "]";
      TF_ASSIGN_OR_RETURN(auto part, ParseHfDecoder(&(*list)[i], reader, item));
      if (part == nullptr) return reader.Error(item, "a Sequence entry may not be null");
      // Named at the step that takes the chain past the bound.
      growth *= part->MaxGrowth();
      if (growth > kMaxTextGrowth) return GrowthError(reader, item, growth);
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<HfDecoder>(std::make_unique<Sequence>(std::move(parts)));
  }
  return UnsupportedComponent(reader, path, "decoder", type, kSupported);
}

std::string DecodeTokenTexts(const HfDecoder* decoder, std::vector<std::string> tokens) {
  std::string out;
  if (decoder == nullptr) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder->Apply(&tokens);
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace tierflow

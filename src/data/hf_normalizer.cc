// The normalizers of hf_normalizer.h.
#include "data/hf_normalizer.h"

#include <cstdlib>
#include <vector>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "data/hf_component.h"
#include "data/regex_pattern.h"
#include "data/unicode_class.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

class UnicodeForm final : public HfNormalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  StatusOr<std::string> Apply(std::string text) const override {
    if (text.empty()) return text;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) {
      return InvalidArgumentError(std::string("Unicode normalization failed: ") +
                                  utf8proc_errmsg(n));
    }
    std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
  }

 private:
  int options_;
};

class Prepend final : public HfNormalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  StatusOr<std::string> Apply(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceString final : public HfNormalizer {
 public:
  ReplaceString(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  StatusOr<std::string> Apply(std::string text) const override {
    return ReplaceAll(text, from_, to_);
  }

 private:
  std::string from_, to_;
};

class ReplaceRegex final : public HfNormalizer {
 public:
  ReplaceRegex(RegexPattern pattern, std::string to)
      : pattern_(std::move(pattern)), to_(std::move(to)) {}
  StatusOr<std::string> Apply(std::string text) const override {
    TF_ASSIGN_OR_RETURN(auto matches, pattern_.FindAll(text));
    if (matches.empty()) return text;
    std::string out;
    size_t pos = 0;
    for (const auto& [begin, end] : matches) {
      out.append(text, pos, begin - pos);
      out += to_;
      pos = end;
    }
    out.append(text, pos, std::string::npos);
    return out;
  }

 private:
  RegexPattern pattern_;
  std::string to_;
};

class Strip final : public HfNormalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  StatusOr<std::string> Apply(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) begin = data_internal::SkipSpaceForward(text, 0);
    if (right_) end = std::max(begin, data_internal::SkipSpaceBackward(text, end));
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Sequence final : public HfNormalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfNormalizer>> parts) : parts_(std::move(parts)) {}
  StatusOr<std::string> Apply(std::string text) const override {
    for (const auto& part : parts_) {
      TF_ASSIGN_OR_RETURN(text, part->Apply(std::move(text)));
    }
    return text;
  }

 private:
  std::vector<std::unique_ptr<HfNormalizer>> parts_;
};

constexpr const char* kSupported = "NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Sequence";

}  // namespace

StatusOr<std::unique_ptr<HfNormalizer>> ParseHfNormalizer(const Json* spec,
                                                          const JsonReader& reader,
                                                          const std::string& path) {
  if (spec == nullptr) return std::unique_ptr<HfNormalizer>();
  TF_ASSIGN_OR_RETURN(std::string type, ComponentTypeOf(*spec, reader, path));
  const int kStable = UTF8PROC_STABLE;
  if (type == "NFC")
    return std::unique_ptr<HfNormalizer>(std::make_unique<UnicodeForm>(kStable | UTF8PROC_COMPOSE));
  if (type == "NFD")
    return std::unique_ptr<HfNormalizer>(
        std::make_unique<UnicodeForm>(kStable | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") {
    return std::unique_ptr<HfNormalizer>(
        std::make_unique<UnicodeForm>(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "NFKD") {
    return std::unique_ptr<HfNormalizer>(
        std::make_unique<UnicodeForm>(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Prepend") {
    TF_ASSIGN_OR_RETURN(std::string prefix, RequiredString(*spec, reader, path, "prepend"));
    return std::unique_ptr<HfNormalizer>(std::make_unique<Prepend>(std::move(prefix)));
  }
  if (type == "Replace") {
    TF_ASSIGN_OR_RETURN(HfPattern pattern, ParseHfPattern(*spec, reader, path));
    TF_ASSIGN_OR_RETURN(std::string content, RequiredString(*spec, reader, path, "content"));
    if (pattern.regex)
      return std::unique_ptr<HfNormalizer>(
          std::make_unique<ReplaceRegex>(*std::move(pattern.regex), content));
    if (pattern.literal.empty()) return reader.Error(path + ".pattern", "the pattern is empty");
    return std::unique_ptr<HfNormalizer>(
        std::make_unique<ReplaceString>(std::move(pattern.literal), std::move(content)));
  }
  if (type == "Strip") {
    TF_ASSIGN_OR_RETURN(bool left, OptionalBool(*spec, reader, path, "strip_left", true));
    TF_ASSIGN_OR_RETURN(bool right, OptionalBool(*spec, reader, path, "strip_right", true));
    return std::unique_ptr<HfNormalizer>(std::make_unique<Strip>(left, right));
  }
  if (type == "Sequence") {
    TF_ASSIGN_OR_RETURN(const Json* list, RequiredArray(*spec, reader, path, "normalizers"));
    std::vector<std::unique_ptr<HfNormalizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item = path + ".normalizers[" + std::to_string(i) + "]";
      TF_ASSIGN_OR_RETURN(auto part, ParseHfNormalizer(&(*list)[i], reader, item));
      if (part == nullptr) return reader.Error(item, "a Sequence entry may not be null");
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<HfNormalizer>(std::make_unique<Sequence>(std::move(parts)));
  }
  return UnsupportedComponent(reader, path, "normalizer", type, kSupported);
}

}  // namespace tierflow

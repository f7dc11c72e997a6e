// The normalizers of hf_normalizer.h.
#include "data/hf_normalizer.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <vector>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "common/path_component.h"
#include "data/hf_component.h"
#include "data/regex_pattern.h"
#include "data/unicode_class.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

// `where` in each component names it in errors: "FILE: normalizer.normalizers[3]".
class UnicodeForm final : public HfNormalizer {
 public:
  UnicodeForm(int options, std::string where) : options_(options), where_(std::move(where)) {}
  StatusOr<std::string> Rewrite(std::string text, const GrowthLimit& limit) const override {
    if (text.empty()) return text;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) {
      return InvalidArgumentError(where_ + ": Unicode normalization failed: " + utf8proc_errmsg(n));
    }
    // utf8proc sizes its output itself; a form expands a character at most
    // 11 times its bytes, so the check after it bounds what was built.
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
    if (static_cast<size_t>(n) > limit.max_bytes) {
      return limit.Error(where_, "Unicode normalization");
    }
    return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  }

 private:
  int options_;
  std::string where_;
};

class Prepend final : public HfNormalizer {
 public:
  Prepend(std::string prefix, std::string where)
      : prefix_(std::move(prefix)), where_(std::move(where)) {}
  StatusOr<std::string> Rewrite(std::string text, const GrowthLimit& limit) const override {
    if (text.empty()) return text;
    if (text.size() + prefix_.size() > limit.max_bytes) {
      return limit.Error(where_, "Prepend " + QuotedExcerpt(prefix_));
    }
    return prefix_ + text;
  }

 private:
  std::string prefix_, where_;
};

class ReplaceString final : public HfNormalizer {
 public:
  ReplaceString(std::string from, std::string to, std::string where)
      : from_(std::move(from)), to_(std::move(to)), where_(std::move(where)) {}
  StatusOr<std::string> Rewrite(std::string text, const GrowthLimit& limit) const override {
    std::optional<std::string> out = ReplaceAllWithin(text, from_, to_, limit.max_bytes);
    if (!out) {
      return limit.Error(where_, "Replace " + QuotedExcerpt(from_) + " -> " + QuotedExcerpt(to_));
    }
    return *std::move(out);
  }

 private:
  std::string from_, to_, where_;
};

class ReplaceRegex final : public HfNormalizer {
 public:
  ReplaceRegex(RegexPattern pattern, std::string to, std::string where)
      : pattern_(std::move(pattern)), to_(std::move(to)), where_(std::move(where)) {}
  StatusOr<std::string> Rewrite(std::string text, const GrowthLimit& limit) const override {
    TF_ASSIGN_OR_RETURN(auto matches, pattern_.FindAll(text));
    if (matches.empty()) return text;
    std::string out;
    size_t pos = 0;
    for (const auto& [begin, end] : matches) {
      // What is built so far, this replacement, and the rest at least.
      if (out.size() + (begin - pos) + to_.size() + (text.size() - end) > limit.max_bytes) {
        return limit.Error(where_, "Replace regex " + QuotedExcerpt(pattern_.pattern()) + " -> " +
                                       QuotedExcerpt(to_));
      }
      out.append(text, pos, begin - pos);
      out += to_;
      pos = end;
    }
    out.append(text, pos, std::string::npos);
    return out;
  }

 private:
  RegexPattern pattern_;
  std::string to_, where_;
};

class Strip final : public HfNormalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  StatusOr<std::string> Rewrite(std::string text, const GrowthLimit&) const override {
    size_t begin = 0, end = text.size();
    if (left_) begin = data_internal::SkipSpaceForward(text, 0);
    if (right_) end = std::max(begin, data_internal::SkipSpaceBackward(text, end));
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Every step is bound by the limit of the Sequence's own input, so a chain
// cannot compound what each step may add.
class Sequence final : public HfNormalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<HfNormalizer>> parts) : parts_(std::move(parts)) {}
  StatusOr<std::string> Rewrite(std::string text, const GrowthLimit& limit) const override {
    for (const auto& part : parts_) {
      TF_ASSIGN_OR_RETURN(text, part->Rewrite(std::move(text), limit));
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
  const std::string where = reader.label() + ": " + path;
  const int kStable = UTF8PROC_STABLE;
  const auto form = [&](int options) {
    return std::unique_ptr<HfNormalizer>(std::make_unique<UnicodeForm>(options, where));
  };
  if (type == "NFC") return form(kStable | UTF8PROC_COMPOSE);
  if (type == "NFD") return form(kStable | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return form(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return form(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Prepend") {
    TF_ASSIGN_OR_RETURN(std::string prefix, RequiredString(*spec, reader, path, "prepend"));
    return std::unique_ptr<HfNormalizer>(std::make_unique<Prepend>(std::move(prefix), where));
  }
  if (type == "Replace") {
    TF_ASSIGN_OR_RETURN(HfPattern pattern, ParseHfPattern(*spec, reader, path));
    TF_ASSIGN_OR_RETURN(std::string content, RequiredString(*spec, reader, path, "content"));
    if (pattern.regex) {
      return std::unique_ptr<HfNormalizer>(
          std::make_unique<ReplaceRegex>(*std::move(pattern.regex), std::move(content), where));
    }
    if (pattern.literal.empty()) return reader.Error(path + ".pattern", "the pattern is empty");
    return std::unique_ptr<HfNormalizer>(
        std::make_unique<ReplaceString>(std::move(pattern.literal), std::move(content), where));
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

// tokenizer.json's "normalizer": how text is rewritten before it is split.
//
// Supported types (Hugging Face tokenizers' semantics): NFC, NFD, NFKC, NFKD
// (utf8proc, Unicode 15), Prepend {prepend} (only to non-empty text), Replace
// {pattern: {String} | {Regex}, content} (every match), Strip {strip_left,
// strip_right} (Unicode white space), and Sequence {normalizers}. Anything
// else (Lowercase, BertNormalizer, Precompiled, ...) is refused by name when
// the file is loaded.
//
// Bounded: the normalized text may hold at most GrowthLimit::For(input) bytes
// (text_growth.h), checked at every step, and a Replace regex is bound by its
// matching work (regex_pattern.h).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "data/text_growth.h"
#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

class HfNormalizer {
 public:
  virtual ~HfNormalizer() = default;
  // REQUIRES: `text` is valid UTF-8; the result is too. Errors:
  // InvalidArgument naming the file and the step (e.g. "tokenizer.json:
  // normalizer.normalizers[3]") when the text would outgrow
  // GrowthLimit::For(text.size()), or a Replace regex its work bound.
  StatusOr<std::string> Apply(std::string text) const {
    const GrowthLimit limit = GrowthLimit::For(text.size());
    return Rewrite(std::move(text), limit);
  }
  // Apply's step: `text` (already rewritten by the steps before, in a
  // Sequence) may grow to limit.max_bytes.
  virtual StatusOr<std::string> Rewrite(std::string text, const GrowthLimit& limit) const = 0;
};

// Parses the normalizer at `path` of the document `reader` names. A null or
// missing one is nullptr (text passes unchanged). Errors: InvalidArgument for
// a malformed entry; Unimplemented naming an unsupported type and the types
// that are supported.
StatusOr<std::unique_ptr<HfNormalizer>> ParseHfNormalizer(const nlohmann::json* spec,
                                                          const JsonReader& reader,
                                                          const std::string& path);

}  // namespace tierflow

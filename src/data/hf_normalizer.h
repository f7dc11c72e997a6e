// tokenizer.json's "normalizer": how text is rewritten before it is split.
//
// Supported types (Hugging Face tokenizers' semantics): NFC, NFD, NFKC, NFKD
// (utf8proc, Unicode 15), Prepend {prepend} (only to non-empty text), Replace
// {pattern: {String} | {Regex}, content} (every match), Strip {strip_left,
// strip_right} (Unicode white space), and Sequence {normalizers}. Anything
// else (Lowercase, BertNormalizer, Precompiled, ...) is refused by name when
// the file is loaded.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

class HfNormalizer {
 public:
  virtual ~HfNormalizer() = default;
  // REQUIRES: `text` is valid UTF-8; the result is too.
  virtual StatusOr<std::string> Apply(std::string text) const = 0;
};

// Parses the normalizer at `path` of the document `reader` names. A null or
// missing one is nullptr (text passes unchanged). Errors: InvalidArgument for
// a malformed entry; Unimplemented naming an unsupported type and the types
// that are supported.
StatusOr<std::unique_ptr<HfNormalizer>> ParseHfNormalizer(const nlohmann::json* spec,
                                                          const JsonReader& reader,
                                                          const std::string& path);

}  // namespace tierflow

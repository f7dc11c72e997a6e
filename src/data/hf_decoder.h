// tokenizer.json's "decoder": how tokens' texts become text again.
//
// Supported types (Hugging Face tokenizers' semantics, applied to the list of
// token texts in order):
//   ByteLevel        each token's byte-level characters back to its bytes (a
//                    token with characters outside the alphabet, such as an
//                    added token, stays as written)
//   Replace          {pattern: {String}, content} in every token
//   ByteFallback     runs of "<0xXX>" tokens become their bytes (U+FFFD per
//                    byte where they are not valid UTF-8)
//   Fuse             all tokens become one
//   Strip            {content, start, stop}: up to `start` leading and `stop`
//                    trailing `content` characters off each token
//   Metaspace        {replacement, prepend_scheme}: the replacement becomes a
//                    space, except in the first token, where tokenizers 0.23
//                    drops it (every one, not only the leading one) unless
//                    prepend_scheme is "never"
//   Sequence         {decoders}
// With no decoder tokens are joined with spaces, as tokenizers does. Anything
// else is refused by name when the file is loaded.
//
// Bounded when loaded: only Replace lengthens text (by at most its content's
// bytes over its pattern's), and a decoder whose Replace steps together could
// lengthen it more than kMaxTextGrowth times (text_growth.h) is refused, since
// decoding cannot fail.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

class HfDecoder {
 public:
  virtual ~HfDecoder() = default;
  virtual void Apply(std::vector<std::string>* tokens) const = 0;
  // The most times Apply may lengthen the tokens' total text.
  virtual double MaxGrowth() const { return 1.0; }
};

// Null or missing is nullptr. Errors: InvalidArgument for a malformed entry
// or a decoder that may grow text more than kMaxTextGrowth times;
// Unimplemented naming an unsupported type.
StatusOr<std::unique_ptr<HfDecoder>> ParseHfDecoder(const nlohmann::json* spec,
                                                    const JsonReader& reader,
                                                    const std::string& path);

// The text of `tokens` through `decoder` (or joined with spaces when null).
std::string DecodeTokenTexts(const HfDecoder* decoder, std::vector<std::string> tokens);

}  // namespace tierflow

// tokenizer.json's "pre_tokenizer": how normalized text is cut into the
// pieces the model encodes one at a time.
//
// Supported types (Hugging Face tokenizers' semantics):
//   ByteLevel {add_prefix_space, use_regex}  optionally prepend ' ' to each
//       piece that lacks one, optionally split with GPT-2's regex
//       (gpt2_pretokenize.h), then write every byte in GPT-2's byte-level
//       alphabet (gpt2_byte_level.h), which is how the vocabulary spells
//       tokens. GPT-2, Llama 3 and Qwen2 use it.
//   Split {pattern, behavior, invert}  a literal or regex (regex_pattern.h)
//       with the behaviors Removed, Isolated, MergedWithPrevious,
//       MergedWithNext and Contiguous. Llama 3 and Qwen2 split with a regex.
//   Metaspace {replacement, prepend_scheme, split}  spaces become the
//       replacement ("▁"), which is prepended always, to the first piece of the
//       input only ("first"), or never; `split` cuts before each replacement.
//       Mistral and newer SentencePiece conversions use it.
//   Sequence {pretokenizers}
// Anything else is refused by name when the file is loaded.
//
// Bounded: the pieces together may hold at most GrowthLimit::For(input)
// bytes (text_growth.h), checked before each step builds them, and a Split
// regex is bound by its matching work (regex_pattern.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/text_growth.h"
#include "io/json_reader.h"
#include "tierflow/status.h"

namespace tierflow {

// A piece of text being pre-tokenized. `at_start`: it begins at offset 0 of
// the whole input (Metaspace's "first" prepends only there).
struct TextPiece {
  std::string text;
  bool at_start = false;
};

class HfPreTokenizer {
 public:
  virtual ~HfPreTokenizer() = default;
  // Replaces `pieces` by their split. Empty pieces are dropped. `limit` is
  // GrowthLimit::For the bytes of the text that was cut into the first
  // pieces. Errors: InvalidArgument naming the file and the step (e.g.
  // "tokenizer.json: pre_tokenizer.pretokenizers[1]") when the pieces would
  // hold more than limit.max_bytes together, or a Split regex exceeds its
  // work bound.
  virtual Status Apply(std::vector<TextPiece>* pieces, const GrowthLimit& limit) const = 0;
};

// A null or missing pre-tokenizer is nullptr (the text is one piece). Errors:
// InvalidArgument for a malformed entry; Unimplemented naming an unsupported
// type or option.
StatusOr<std::unique_ptr<HfPreTokenizer>> ParseHfPreTokenizer(const nlohmann::json* spec,
                                                              const JsonReader& reader,
                                                              const std::string& path);

}  // namespace tierflow

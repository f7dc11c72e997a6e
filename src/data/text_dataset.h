// Training data from text: plain text files and JSONL, tokenized into a
// TokenSource; and LoadTokens, which picks the reader for a dataset path.
//
// A plain text file is one document, tokenized whole (no end-of-text token is
// added). A JSONL file holds one JSON object per line; the string in its text
// field is a document, and each document is preceded by the tokenizer's
// end-of-text token, as llm.c's data scripts write them (so the model sees a
// document boundary before every document, including the first). Blank lines
// are skipped. Files are read whole into memory: fine for the corpora text
// tokenization is practical for; pre-tokenize big corpora into a token file.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "data/token_source.h"
#include "data/tokenizer.h"

namespace tierflow {

// Text and JSONL files are read whole and tokenized in memory (the tokens take
// about as much memory again); a larger corpus belongs in a token file, which
// is memory-mapped. A file over this size is refused by name.
inline constexpr size_t kMaxTextDatasetBytes = size_t{8} << 30;

// Errors name the path: NotFound and other ErrnoStatus; InvalidArgument when
// the file is larger than kMaxTextDatasetBytes, when it is empty, when the
// tokenizer refuses the text (with the byte offset), or when an id is >=
// vocab_size (the model's vocabulary may be smaller than the tokenizer's).
StatusOr<TokenSource> TokenizeTextFile(const std::string& path, const Tokenizer& tokenizer,
                                       int32_t vocab_size);

// As above; every error about a line names it as "path:LINE": not JSON, not a
// JSON object, no `text_field`, a text field that is not a string, text the
// tokenizer refuses. A file with no documents is InvalidArgument.
StatusOr<TokenSource> TokenizeJsonlFile(const std::string& path, const Tokenizer& tokenizer,
                                        std::string_view text_field, int32_t vocab_size);

enum class DataFormat {
  kAuto,  // by the file name: *.jsonl -> kJsonl, *.bin / *.tok -> kTokens, else kText
  kText,
  kJsonl,
  kTokens,  // a raw or llm.c token file (token_source.h)
};
// "auto", "text", "jsonl" or "tokens". Errors: InvalidArgument listing the choices.
StatusOr<DataFormat> ParseDataFormat(std::string_view name);
// The format kAuto resolves to for `path`.
DataFormat DataFormatForPath(std::string_view path);

struct DatasetOptions {
  std::string path;                       // REQUIRED
  DataFormat format = DataFormat::kAuto;  // Default: by file name
  std::string text_field = "text";        // JSONL field holding the document. Default: "text"
  std::optional<TokenDtype> token_dtype;  // raw token files. Default: u16 (or the llm.c header's)
  int32_t vocab_size = 0;                 // the model's vocabulary; REQUIRED > 0
};

// Reads the dataset `options` describe. `tokenizer` is needed for text and
// JSONL (InvalidArgument when null then) and unused for token files.
StatusOr<TokenSource> LoadTokens(const DatasetOptions& options, const Tokenizer* tokenizer);

}  // namespace tierflow

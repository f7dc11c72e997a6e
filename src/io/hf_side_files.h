// The files beside a Hugging Face model's weights that say how to use it:
// its tokenizer (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// added_tokens.json, tokenizer.model, vocab.json, merges.txt), its generation
// defaults (generation_config.json) and its chat template (chat_template.jinja,
// chat_template.json). A fine-tuned model saved without them is not a drop-in
// replacement for the one that went in, so the trainer reads them from the
// source directory when the run starts (a source moved or cleaned from a
// cache during a long run must not fail its saves) and writes them into
// every model it saves.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "io/file_system.h"
#include "tierflow/status.h"

namespace tierflow {

// The names above, in a fixed order.
const std::vector<std::string>& HfSideFileNames();

// All side files together larger than this are refused, naming the file
// that crosses it (Llama 3's tokenizer.json is 9 MB): a bound on what a
// source directory makes the run hold.
inline constexpr size_t kMaxHfSideFilesBytes = size_t{256} << 20;

struct HfSideFiles {
  std::vector<std::pair<std::string, std::string>> files;  // (name, contents)
  size_t bytes() const;
};

// Reads every side file present in `source_dir`, following symbolic links (a
// Hugging Face cache snapshot links to its blobs); absent ones are skipped.
// Errors: InvalidArgument naming the file that crosses kMaxHfSideFilesBytes
// or is a directory; I/O errors naming the path.
StatusOr<HfSideFiles> ReadHfSideFiles(const std::string& source_dir);

// Writes them into `dest_dir` (which exists), each crash-safely
// (WriteStringToFileAtomically). Errors: I/O errors naming the path.
Status WriteHfSideFiles(const HfSideFiles& side, const std::string& dest_dir,
                        FileSystem* fs = nullptr);

}  // namespace tierflow

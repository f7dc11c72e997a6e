// LoadTokenizer: "byte", a tokenizer.json, or a directory of GPT-2 files.
#include "data/tokenizer.h"

#include "data/byte_tokenizer.h"
#include "data/file_util.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace tierflow {
namespace {

bool EndsWith(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

const std::string& Tokenizer::chat_template() const {
  static const std::string kNone;
  return kNone;
}

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec) {
  if (spec == "byte") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (IsDirectoryPath(spec)) {
    const std::string dir = spec.back() == '/' ? spec : spec + "/";
    if (IsRegularFile(dir + "tokenizer.json")) {
      TF_ASSIGN_OR_RETURN(auto t, HfTokenizer::FromFile(dir + "tokenizer.json"));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
    if (IsRegularFile(dir + "tokenizer.model")) {
      TF_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::FromFile(dir + "tokenizer.model"));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
    for (const auto& [vocab, merges] :
         {std::pair<const char*, const char*>{"vocab.json", "merges.txt"},
          {"encoder.json", "vocab.bpe"}}) {
      if (IsRegularFile(dir + vocab) && IsRegularFile(dir + merges)) {
        TF_ASSIGN_OR_RETURN(auto t,
                            Gpt2BpeTokenizer::FromVocabAndMerges(dir + vocab, dir + merges));
        return std::unique_ptr<Tokenizer>(std::move(t));
      }
    }
    return NotFoundError(
        "no tokenizer in directory " + spec +
        ": expected tokenizer.json, tokenizer.model, vocab.json + merges.txt, or encoder.json + "
        "vocab.bpe");
  }
  if (IsRegularFile(spec)) {
    if (EndsWith(spec, ".model")) {
      TF_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::FromFile(spec));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
    TF_ASSIGN_OR_RETURN(auto t, HfTokenizer::FromFile(spec));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return NotFoundError("tokenizer \"" + spec +
                       "\" is neither \"byte\" nor an existing tokenizer.json, tokenizer.model or "
                       "tokenizer directory");
}

}  // namespace tierflow

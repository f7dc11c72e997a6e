// SentencePieceTokenizer over libsentencepiece.
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "data/unicode_class.h"
#include "io/file_reader.h"

namespace tierflow {
SentencePieceTokenizer::SentencePieceTokenizer()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromFile(
    const std::string& path) {
  TF_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path, kMaxTokenizerFileBytes));
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->path_ = path;
  const auto status = t->processor_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    return InvalidArgumentError(path + ": not a SentencePiece model (" + status.ToString() + ")");
  }
  t->vocab_size_ = t->processor_->GetPieceSize();
  if (t->vocab_size_ <= 0) return InvalidArgumentError(path + ": the model has no pieces");
  if (const int bos = t->processor_->bos_id(); bos >= 0) t->bos_ = bos;
  if (const int eos = t->processor_->eos_id(); eos >= 0) t->eos_ = eos;
  if (t->bos_) {
    t->eot_token_ = *t->bos_;
  } else if (t->eos_) {
    t->eot_token_ = *t->eos_;
  } else {
    return InvalidArgumentError(path +
                                ": the model has neither a BOS nor an EOS piece, so documents "
                                "cannot be separated");
  }
  return t;
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text) const {
  if (const size_t bad = data_internal::FindInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgumentError("the text is not valid UTF-8 at byte offset " +
                                std::to_string(bad));
  }
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) return InternalError(path_ + ": SentencePiece: " + status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodeWithSpecialTokens(
    std::string_view text) const {
  TF_ASSIGN_OR_RETURN(std::vector<int32_t> body, Encode(text));
  if (!bos_) return body;
  body.insert(body.begin(), *bos_);
  return body;
}

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> tokens) const {
  // Ids outside the model would make SentencePiece fail the whole call: each
  // becomes U+FFFD between the decoded runs around it.
  std::string out;
  std::vector<int> run;
  const auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    if (processor_->Decode(run, &text).ok()) {
      out += text;
    } else {
      // Never silently shorter: each id the processor could not decode
      // stands as U+FFFD, as an unknown id does.
      for (size_t i = 0; i < run.size(); ++i) out += "\xEF\xBF\xBD";
    }
    run.clear();
  };
  for (int32_t id : tokens) {
    if (id < 0 || id >= vocab_size_) {
      flush();
      out += "\xEF\xBF\xBD";
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

std::optional<int32_t> SentencePieceTokenizer::TokenId(std::string_view text) const {
  const int id = processor_->PieceToId(text);
  if (id < 0 || id >= vocab_size_ || processor_->IdToPiece(id) != text) return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::Describe() const {
  return "sentencepiece (" + std::to_string(vocab_size_) + " pieces, " + path_ + ")";
}

}  // namespace tierflow

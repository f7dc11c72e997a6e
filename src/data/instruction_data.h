// Instruction data: prompt/response JSONL rendered, tokenized and masked so
// the loss is taken over response tokens only.
//
// Formats (one JSON object per line; blank lines skipped):
//   prompt-completion  {"prompt": "...", "completion": "..."}
//   alpaca             {"instruction": "...", "input": "..." (optional),
//                       "output": "..."}
//   chat               {"messages": [{"role": "system"|"user"|"assistant",
//                       "content": "..."}, ...]}
// Rendering. chat uses the chat template (chat_template.h): the one named by
// `chat_template`, else the one detected from the tokenizer's. prompt-
// completion and alpaca are rendered plainly (BOS where the tokenizer starts
// documents with one, the prompt, the response, the EOS) unless a chat
// template is named, in which case each sample is a one-turn user/assistant
// conversation. alpaca's plain prompt is Stanford Alpaca's ("Below is an
// instruction that describes a task...", with or without its Input section).
//
// Masking. The response tokens (and the EOS/end-of-turn after them) are
// trained; everything else gets target kIgnoreTarget. Each run of text
// between special tokens is tokenized whole, as the model will see it, and a
// response's first and last tokens are found by tokenizing the text up to
// each boundary and comparing (a token straddling a boundary belongs to the
// response).
//
// Length. A sample longer than seq_len + 1 tokens is truncated (its end cut)
// or dropped, by option; a sample with no trained token left within seq_len
// is dropped. Every count is reported in InstructionStats.
//
// Rows. Unpacked, each sample is one row, padded after its end (padding
// targets are ignored; causal attention never lets a sample see its
// padding). Packed, samples are laid end to end in rows of seq_len tokens,
// in file order (a sample that does not fit in what is left of a row starts
// the next one; no sample is split); each sample's positions restart at 0
// (RowSet::positions), and the model keeps attention within each sample
// (MicroBatch::positions), so a packed sample trains exactly as it would
// alone. Padding fills each row's end as one more sample with no trained
// targets. Packing needs a RoPE model (Llama, Qwen, Mistral).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"
#include "data/row_set.h"
#include "data/tokenizer.h"

namespace tierflow {

enum class InstructionFormat { kPromptCompletion, kAlpaca, kChat };

// "prompt-completion", "alpaca", "chat"; errors list them.
StatusOr<InstructionFormat> ParseInstructionFormat(std::string_view name);
std::string_view InstructionFormatName(InstructionFormat format);

struct InstructionOptions {
  std::string path;  // REQUIRED
  InstructionFormat format = InstructionFormat::kChat;
  // Overrides the tokenizer's template (chat), or renders prompt-completion /
  // alpaca as conversations. Default: unset.
  std::optional<ChatTemplateKind> chat_template;
  int seq_len = 0;         // T; REQUIRED > 0
  bool drop_long = false;  // drop samples over T + 1 tokens instead of truncating them
  bool packing = false;    // several samples per row (see Rows above)
  int32_t vocab_size = 0;  // the model's vocabulary; REQUIRED > 0
};

struct InstructionStats {
  int64_t samples = 0;            // lines read
  int64_t kept = 0;               // samples in the rows
  int64_t truncated = 0;          // kept, with their end cut at seq_len + 1 tokens
  int64_t dropped_long = 0;       // over seq_len + 1 tokens with drop_long
  int64_t dropped_untrained = 0;  // no trained token within seq_len
  int64_t tokens = 0;             // input tokens in the rows (padding excluded)
  int64_t trained_tokens = 0;     // targets trained on
  int64_t rows = 0;
  int64_t dropped_system_messages = 0;  // mistral: see chat_template.h
  std::string chat_template;            // the template used, or "" for plain rendering
};

struct InstructionData {
  RowSet rows;
  InstructionStats stats;
};

// A rendered sequence tokenized: its ids and which are trained targets (see
// Masking above). Errors: the tokenizer's, for a text part it refuses.
struct TokenizedSample {
  std::vector<int32_t> ids;
  std::vector<bool> trained;
};
StatusOr<TokenizedSample> TokenizeRendered(const std::vector<RenderedPart>& parts,
                                           const Tokenizer& tokenizer);

// Errors name the path, and for a line "path:LINE" and the field: not JSON,
// not an object, a missing or mistyped field, an unknown role, text the
// tokenizer refuses, an id at or above vocab_size; no chat template (chat
// without one detected or named); a file over kMaxTextDatasetBytes; no sample
// left to train on.
StatusOr<InstructionData> LoadInstructionData(const InstructionOptions& options,
                                              const Tokenizer& tokenizer);
// The same on JSONL text already in memory; options.path names it in errors.
StatusOr<InstructionData> ParseInstructionData(std::string_view text,
                                               const InstructionOptions& options,
                                               const Tokenizer& tokenizer);

}  // namespace tierflow

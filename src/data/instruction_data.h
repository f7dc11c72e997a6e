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
// (RowSet::FillRow's positions), and the model keeps attention within each
// sample (MicroBatch::positions), so a packed sample trains exactly as it
// would alone. Padding fills each row's end as one more sample with no
// trained targets. Packing needs a RoPE model (Llama, Qwen, Mistral).
//
// Memory. The file is streamed a line at a time, never read whole, and each
// line is held to max_sample_bytes before it is parsed (the parse and the
// tokenization of one line take several times its size). The samples are
// kept as their tokens, not as padded rows (row_set.h), and the RowSet is
// held to memory_budget_bytes while it is read: before each sample is added,
// what the rows and the loader's shuffled order of them (8 bytes a row)
// will then take is checked against the budget, so a dataset too large for
// the host is refused by name instead of being read until the OOM killer
// ends the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
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

// The longest JSONL line (one sample) accepted by default: 16 MiB is some
// four million tokens, past any sequence trained here, while its parse and
// tokenization stay within a few hundred MB.
inline constexpr size_t kDefaultMaxSampleBytes = size_t{16} << 20;
// The most max_sample_bytes may be raised to.
inline constexpr size_t kMaxSampleBytesLimit = size_t{1} << 30;

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
  // A longer line is refused by number and size before it is parsed (see
  // Memory above). REQUIRED in [1, kMaxSampleBytesLimit]. Default: 16 MiB.
  size_t max_sample_bytes = kDefaultMaxSampleBytes;
  // Host bytes the rows and their shuffled order may take (see Memory
  // above). Default: no bound.
  uint64_t memory_budget_bytes = std::numeric_limits<uint64_t>::max();
  // Where the budget comes from, for its error (e.g. "the host's usable
  // memory less ..."). Default: "".
  std::string memory_budget_source;
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

// Errors name the path, and for a line "path:LINE" and the field: a line
// over max_sample_bytes (with its size and the bound), not JSON, not an
// object, a missing or mistyped field, an unknown role, text the tokenizer
// refuses, an id at or above vocab_size; no chat template (chat without one
// detected or named); no sample left to train on (InvalidArgument); the rows
// over memory_budget_bytes (OutOfMemory, with the bytes, the budget and the
// samples read so far); the file cannot be opened or read (ErrnoStatus).
StatusOr<InstructionData> LoadInstructionData(const InstructionOptions& options,
                                              const Tokenizer& tokenizer);
// The same on JSONL text already in memory; options.path names it in errors.
StatusOr<InstructionData> ParseInstructionData(std::string_view text,
                                               const InstructionOptions& options,
                                               const Tokenizer& tokenizer);

}  // namespace tierflow

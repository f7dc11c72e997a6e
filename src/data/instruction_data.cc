// Instruction data: streaming, rendering, masked tokenization, rows within a budget.
#include "data/instruction_data.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "common/units.h"
#include "io/json_util.h"
#include "io/line_reader.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kAlpacaWithInput =
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n";
constexpr std::string_view kAlpacaNoInput =
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n";

using Tokenized = TokenizedSample;

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Tokenizes one run of text parts (no token parts inside), appending to out.
Status EncodeRun(const std::vector<const RenderedPart*>& run, bool at_start,
                 const Tokenizer& tokenizer, Tokenized* out) {
  std::string text;
  for (const RenderedPart* p : run) text += p->text;
  const auto encode = [&](std::string_view t) {
    return at_start ? tokenizer.Encode(t) : tokenizer.EncodeContinuation(t);
  };
  TF_ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(text));
  // Stretches of parts with one trained flag; where the flag changes, the
  // first token of the next stretch is the end of the common prefix of the
  // run's ids and the ids of the text before the boundary.
  const auto emit = [&](size_t begin, size_t end, bool trained) {
    for (size_t i = begin; i < end; ++i) {
      out->ids.push_back(ids[i]);
      out->trained.push_back(trained);
    }
  };
  size_t begin = 0, offset = 0;
  for (size_t k = 0; k < run.size(); ++k) {
    if (k > 0 && run[k]->trained != run[k - 1]->trained) {
      TF_ASSIGN_OR_RETURN(std::vector<int32_t> prefix,
                          encode(std::string_view(text).substr(0, offset)));
      const size_t cut = std::max(begin, CommonPrefix(prefix, ids));
      emit(begin, cut, run[k - 1]->trained);
      begin = cut;
    }
    offset += run[k]->text.size();
  }
  emit(begin, ids.size(), run.back()->trained);
  return Status::Ok();
}

}  // namespace

StatusOr<TokenizedSample> TokenizeRendered(const std::vector<RenderedPart>& parts,
                                           const Tokenizer& tokenizer) {
  Tokenized out;
  std::vector<const RenderedPart*> run;
  bool at_start = true;
  const auto flush = [&]() -> Status {
    if (run.empty()) return Status::Ok();
    TF_RETURN_IF_ERROR(EncodeRun(run, at_start, tokenizer, &out));
    run.clear();
    at_start = false;
    return Status::Ok();
  };
  for (const RenderedPart& p : parts) {
    if (p.token >= 0) {
      TF_RETURN_IF_ERROR(flush());
      out.ids.push_back(p.token);
      out.trained.push_back(p.trained);
      at_start = false;
    } else if (!p.text.empty()) {
      run.push_back(&p);
    }
  }
  TF_RETURN_IF_ERROR(flush());
  return out;
}

namespace {

StatusOr<std::string> StringField(const Json& doc, std::string_view key, const std::string& where,
                                  bool required) {
  auto it = doc.find(std::string(key));
  if (it == doc.end() || it->is_null()) {
    if (!required) return std::string();
    return InvalidArgumentError(where + ": no \"" + std::string(key) + "\" field");
  }
  if (!it->is_string()) {
    return InvalidArgumentError(where + ": \"" + std::string(key) + "\" is a " +
                                std::string((*it).type_name()) + ", not a string");
  }
  return it->get<std::string>();
}

StatusOr<std::vector<ChatMessage>> ReadMessages(const Json& doc, const std::string& where) {
  auto it = doc.find("messages");
  if (it == doc.end()) return InvalidArgumentError(where + ": no \"messages\" field");
  if (!it->is_array()) {
    return InvalidArgumentError(where + ": \"messages\" is a " + std::string((*it).type_name()) +
                                ", not an array");
  }
  if (it->empty()) return InvalidArgumentError(where + ": \"messages\" is empty");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string field = where + ": messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      return InvalidArgumentError(field + " is a " + std::string((m).type_name()) +
                                  ", not an object");
    }
    ChatMessage message;
    TF_ASSIGN_OR_RETURN(message.role, StringField(m, "role", field, true));
    TF_ASSIGN_OR_RETURN(message.content, StringField(m, "content", field, true));
    messages.push_back(std::move(message));
  }
  return messages;
}

// The plain rendering of a prompt/response pair.
std::vector<RenderedPart> PlainParts(std::string prompt, std::string response,
                                     const Tokenizer& tokenizer) {
  std::vector<RenderedPart> parts;
  const std::optional<int32_t> bos = tokenizer.bos_token();
  if (bos && tokenizer.eot_token() == *bos) parts.push_back({"", *bos, false});
  parts.push_back({std::move(prompt), -1, false});
  parts.push_back({std::move(response), -1, true});
  parts.push_back({"", tokenizer.eos_token().value_or(tokenizer.eot_token()), true});
  return parts;
}

// The parts of one JSONL line.
StatusOr<std::vector<RenderedPart>> RenderLine(const Json& doc, const InstructionOptions& options,
                                               const std::optional<ChatTemplate>& tmpl,
                                               const Tokenizer& tokenizer, const std::string& where,
                                               RenderStats* stats) {
  std::vector<ChatMessage> messages;
  std::string prompt, response;
  switch (options.format) {
    case InstructionFormat::kChat: {
      TF_ASSIGN_OR_RETURN(messages, ReadMessages(doc, where));
      break;
    }
    case InstructionFormat::kPromptCompletion: {
      TF_ASSIGN_OR_RETURN(prompt, StringField(doc, "prompt", where, true));
      TF_ASSIGN_OR_RETURN(response, StringField(doc, "completion", where, true));
      break;
    }
    case InstructionFormat::kAlpaca: {
      TF_ASSIGN_OR_RETURN(std::string instruction, StringField(doc, "instruction", where, true));
      TF_ASSIGN_OR_RETURN(std::string input, StringField(doc, "input", where, false));
      TF_ASSIGN_OR_RETURN(response, StringField(doc, "output", where, true));
      if (tmpl) {
        prompt = input.empty() ? instruction : instruction + "\n\n" + input;
      } else if (input.empty()) {
        prompt = std::string(kAlpacaNoInput) + instruction + "\n\n### Response:\n";
      } else {
        prompt = std::string(kAlpacaWithInput) + instruction + "\n\n### Input:\n" + input +
                 "\n\n### Response:\n";
      }
      break;
    }
  }
  if (options.format != InstructionFormat::kChat) {
    if (!tmpl) return PlainParts(std::move(prompt), std::move(response), tokenizer);
    messages = {{"user", std::move(prompt)}, {"assistant", std::move(response)}};
  }
  auto parts = RenderChat(*tmpl, messages, tokenizer, stats);
  if (!parts.ok()) return parts.status().WithContext(where);
  return parts;
}

}  // namespace

StatusOr<InstructionFormat> ParseInstructionFormat(std::string_view name) {
  if (name == "prompt-completion") return InstructionFormat::kPromptCompletion;
  if (name == "alpaca") return InstructionFormat::kAlpaca;
  if (name == "chat") return InstructionFormat::kChat;
  return InvalidArgumentError("unknown instruction format \"" + std::string(name) +
                              "\": use prompt-completion, alpaca or chat");
}

std::string_view InstructionFormatName(InstructionFormat format) {
  switch (format) {
    case InstructionFormat::kPromptCompletion:
      return "prompt-completion";
    case InstructionFormat::kAlpaca:
      return "alpaca";
    case InstructionFormat::kChat:
      return "chat";
  }
  return "?";
}

namespace {

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes (" + FormatBytes(n) + ")"; }

// The rows and the loader's shuffled order of them (one int64 a row) once a
// sample of `num_ids` ids is added: what the budget holds.
uint64_t BytesAfterAdding(const RowSet& rows, size_t num_ids) {
  return rows.MemoryBytesAfterAdding(num_ids) +
         static_cast<uint64_t>(rows.rows() + 1) * sizeof(int64_t);
}

StatusOr<InstructionData> ReadInstructionData(LineReader& lines, const InstructionOptions& options,
                                              const Tokenizer& tokenizer) {
  const std::string& path = options.path;
  if (options.seq_len <= 0 || options.vocab_size <= 0) {
    return InvalidArgumentError(path + ": seq_len and vocab_size must be positive");
  }
  std::optional<ChatTemplate> tmpl;
  if (options.chat_template) {
    tmpl = TemplateOfKind(*options.chat_template);
    // Keep the tokenizer's default system prompt when it is the same family.
    if (auto detected = DetectChatTemplate(tokenizer.chat_template());
        detected.ok() && detected->kind == tmpl->kind) {
      tmpl = *detected;
    }
  } else if (options.format == InstructionFormat::kChat) {
    auto detected = DetectChatTemplate(tokenizer.chat_template());
    if (!detected.ok()) return detected.status().WithContext(path + " (--format chat)");
    tmpl = *detected;
  }
  InstructionData data;
  InstructionStats& stats = data.stats;
  stats.chat_template = tmpl ? std::string(ChatTemplateKindName(tmpl->kind)) : "";
  RenderStats render_stats;
  data.rows = RowSet(path, options.seq_len, options.packing,
                     tokenizer.eos_token().value_or(tokenizer.eot_token()));
  std::string_view line;
  while (true) {
    TF_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
    if (!more) break;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path + ":" + std::to_string(lines.line_number());
    if (CancelRequested()) TF_RETURN_IF_ERROR(CheckCancel("reading " + where));
    Json doc;
    JsonParseOptions parse_options;
    parse_options.reject_duplicate_keys = false;
    if (Status parsed = ParseJson(line, where, parse_options, &doc); !parsed.ok()) {
      return InvalidArgumentError(parsed.message());
    }
    if (!doc.is_object()) {
      return InvalidArgumentError(where + ": expected a JSON object, got a " +
                                  std::string((doc).type_name()));
    }
    ++stats.samples;
    TF_ASSIGN_OR_RETURN(auto parts,
                        RenderLine(doc, options, tmpl, tokenizer, where, &render_stats));
    auto tokenized = TokenizeRendered(parts, tokenizer);
    if (!tokenized.ok()) return tokenized.status().WithContext(where);
    Tokenized s = *std::move(tokenized);
    for (int32_t id : s.ids) {
      if (id < 0 || id >= options.vocab_size) {
        return InvalidArgumentError(
            where + ": token id " + std::to_string(id) + " is outside the model's vocabulary of " +
            std::to_string(options.vocab_size) + "; is this the model's tokenizer?");
      }
    }
    const size_t limit = static_cast<size_t>(options.seq_len) + 1;
    const bool cut = s.ids.size() > limit;
    if (cut) {
      if (options.drop_long) {
        ++stats.dropped_long;
        continue;
      }
      s.ids.resize(limit);
      s.trained.resize(limit);
    }
    const auto trained = std::count(s.trained.begin() + 1, s.trained.end(), true);
    if (s.ids.size() < 2 || trained == 0) {
      ++stats.dropped_untrained;
      continue;
    }
    if (const uint64_t need = BytesAfterAdding(data.rows, s.ids.size());
        need > options.memory_budget_bytes) {
      return OutOfMemoryError(
          where + ": the instruction data would take more than " +
          Bytes(options.memory_budget_bytes) + ", its host memory budget" +
          (options.memory_budget_source.empty() ? "" : " (" + options.memory_budget_source + ")") +
          ": " + Bytes(need) + " with this sample, after " + std::to_string(stats.kept) +
          " samples of " + std::to_string(stats.tokens) +
          " tokens (stored unpadded, with the shuffled order of their rows); train on a part of "
          "the file, or where more host memory is free");
    }
    if (cut) ++stats.truncated;
    stats.trained_tokens += trained;
    stats.tokens += static_cast<int64_t>(s.ids.size()) - 1;
    ++stats.kept;
    data.rows.Add(s.ids, s.trained);
  }
  stats.dropped_system_messages = render_stats.dropped_system_messages;
  if (stats.kept == 0) {
    return InvalidArgumentError(
        path + " has no sample to train on (" + std::to_string(stats.samples) + " read, " +
        std::to_string(stats.dropped_long) +
        " dropped as longer than seq_len + 1 = " + std::to_string(options.seq_len + 1) +
        " tokens, " + std::to_string(stats.dropped_untrained) +
        " with no response token within seq_len); raise --seq-len, or keep long samples with "
        "--truncation truncate");
  }
  data.rows.Finish();
  stats.rows = data.rows.rows();
  return data;
}

LineReaderOptions LineOptions(const InstructionOptions& options) {
  LineReaderOptions o;
  o.max_line_bytes = options.max_sample_bytes;
  o.advice =
      "a line is one sample, and parsing and tokenizing it takes several times its size; split "
      "it, or raise --max-sample-bytes (at most " +
      FormatBytes(kMaxSampleBytesLimit) + ") if samples this long are meant";
  return o;
}

Status CheckMaxSampleBytes(const InstructionOptions& options) {
  if (options.max_sample_bytes == 0 || options.max_sample_bytes > kMaxSampleBytesLimit) {
    return InvalidArgumentError(options.path + ": the longest sample accepted is " +
                                std::to_string(options.max_sample_bytes) +
                                " bytes; give 1 byte to " + FormatBytes(kMaxSampleBytesLimit));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<InstructionData> LoadInstructionData(const InstructionOptions& options,
                                              const Tokenizer& tokenizer) {
  TF_RETURN_IF_ERROR(CheckMaxSampleBytes(options));
  TF_ASSIGN_OR_RETURN(LineReader lines, LineReader::Open(options.path, LineOptions(options)));
  return ReadInstructionData(lines, options, tokenizer);
}

StatusOr<InstructionData> ParseInstructionData(std::string_view text,
                                               const InstructionOptions& options,
                                               const Tokenizer& tokenizer) {
  TF_RETURN_IF_ERROR(CheckMaxSampleBytes(options));
  TF_ASSIGN_OR_RETURN(LineReader lines,
                      LineReader::OverText(text, options.path, LineOptions(options)));
  return ReadInstructionData(lines, options, tokenizer);
}

}  // namespace tierflow

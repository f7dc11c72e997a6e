// Fuzz entry point: instruction data (src/data/instruction_data.h) on
// arbitrary JSONL, with every format, chat template, length option and
// packing, through a byte-level tokenizer that has the four templates'
// special tokens.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/gpt2_byte_level.h"
#include "data/hf_tokenizer.h"
#include "data/instruction_data.h"
#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"

namespace tierflow::fuzz {
namespace {

const HfTokenizer& ChatTokenizer() {
  static const std::unique_ptr<HfTokenizer> tok = [] {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b)
      vocab[Gpt2BytesToVocabText(std::string(1, static_cast<char>(b)))] = b;
    nlohmann::json added = nlohmann::json::array();
    int id = 256;
    for (const char* text : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                             "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
      added.push_back({{"id", id++}, {"content", text}, {"special", true}});
    }
    nlohmann::json root = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"added_tokens", added}};
    HfTokenizerConfig config;
    config.bos_token = "<|begin_of_text|>";
    config.eos_token = "<|eot_id|>";
    config.add_bos_token = true;
    config.chat_template = "{{ '<|start_header_id|>' }}";
    auto t = HfTokenizer::Create(root.dump(), "fuzz/tokenizer.json", &config);
    FUZZ_CHECK(t.ok());
    return std::move(*t);
  }();
  return *tok;
}

}  // namespace

void FuzzInstructionJsonl(std::string_view data) {
  if (data.size() < 4) return;
  const Tokenizer& tok = ChatTokenizer();
  InstructionOptions o;
  o.path = "fuzz/data.jsonl";
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(data[i]); };
  o.format = static_cast<InstructionFormat>(byte(0) % 3);
  if (byte(1) % 5 != 0) o.chat_template = static_cast<ChatTemplateKind>(byte(1) % 5 - 1);
  o.drop_long = (byte(2) & 1) != 0;
  o.packing = (byte(2) & 2) != 0;
  o.seq_len = byte(3) % 64 + 1;
  o.vocab_size = tok.vocab_size();
  StatusOr<InstructionData> got = ParseInstructionData(data.substr(4), o, tok);
  if (!got.ok()) {
    FUZZ_CHECK(!got.status().message().empty());
    return;
  }
  const RowSet& rows = got->rows;
  const InstructionStats& s = got->stats;
  const size_t cells = static_cast<size_t>(rows.rows) * static_cast<size_t>(o.seq_len);
  FUZZ_CHECK(rows.rows >= 1 && rows.seq_len == o.seq_len);
  FUZZ_CHECK(rows.inputs.size() == cells && rows.targets.size() == cells);
  FUZZ_CHECK(rows.positions.size() == (o.packing ? cells : 0));
  FUZZ_CHECK(s.kept >= 1 && s.kept <= s.samples && s.rows == rows.rows);
  FUZZ_CHECK(o.packing ? rows.rows <= s.kept : rows.rows == s.kept);
  int64_t trained = 0;
  for (size_t i = 0; i < cells; ++i) {
    FUZZ_CHECK(rows.inputs[i] >= 0 && rows.inputs[i] < o.vocab_size);
    const int32_t t = rows.targets[i];
    FUZZ_CHECK(t == kIgnoreTarget || (t >= 0 && t < o.vocab_size));
    trained += t != kIgnoreTarget ? 1 : 0;
    if (o.packing && i % static_cast<size_t>(o.seq_len) != 0) {
      FUZZ_CHECK(rows.positions[i] == 0 || rows.positions[i] == rows.positions[i - 1] + 1);
    }
  }
  FUZZ_CHECK(trained == s.trained_tokens && trained >= s.kept);
}

}  // namespace tierflow::fuzz

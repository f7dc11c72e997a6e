// Fuzz entry point: instruction data (src/data/instruction_data.h) on
// arbitrary JSONL, with every format, chat template, length option and
// packing, through a byte-level tokenizer that has the four templates'
// special tokens.
#include <memory>
#include <string>
#include <vector>

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
  const size_t t = static_cast<size_t>(o.seq_len);
  FUZZ_CHECK(rows.rows() >= 1 && rows.seq_len() == o.seq_len && rows.packed() == o.packing);
  FUZZ_CHECK(s.kept >= 1 && s.kept <= s.samples && s.rows == rows.rows());
  FUZZ_CHECK(rows.num_samples() == s.kept);
  FUZZ_CHECK(o.packing ? rows.rows() <= s.kept : rows.rows() == s.kept);
  // Unpadded: the tokens and two int64 a sample, beside chunks not yet full.
  FUZZ_CHECK(rows.MemoryBytes() <= static_cast<uint64_t>(s.tokens + s.kept) * 4 +
                                       static_cast<uint64_t>(s.kept) * 16 + 4096);
  std::vector<int32_t> inputs(t), targets(t), positions(t);
  int64_t trained = 0;
  for (int64_t r = 0; r < rows.rows(); ++r) {
    rows.FillRow(r, inputs.data(), targets.data(), positions.data());
    for (size_t i = 0; i < t; ++i) {
      FUZZ_CHECK(inputs[i] >= 0 && inputs[i] < o.vocab_size);
      const int32_t target = targets[i];
      FUZZ_CHECK(target == kIgnoreTarget || (target >= 0 && target < o.vocab_size));
      trained += target != kIgnoreTarget ? 1 : 0;
      if (o.packing && i != 0) {
        FUZZ_CHECK(positions[i] == 0 || positions[i] == positions[i - 1] + 1);
      }
    }
  }
  FUZZ_CHECK(trained == s.trained_tokens && trained >= s.kept);
}

}  // namespace tierflow::fuzz

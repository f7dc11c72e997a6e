// Instruction data: rendering, response-only masking, truncation counts,
// malformed lines, and the rows the DataLoader serves.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/data/data_test_util.h"

#include "data/data_loader.h"
#include "data/instruction_data.h"
#include "data/tokenizer.h"

namespace tierflow {
namespace {

using testing_data::ScratchDir;
using testing_data::WriteBytes;

std::unique_ptr<Tokenizer> Llama3() {
  auto t = LoadTokenizer(std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/llama3");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::vector<int32_t> Encode(const Tokenizer& t, const std::string& text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// A RowSet's rows written out whole, as the DataLoader serves them.
struct DenseRows {
  int64_t rows = 0;
  std::vector<int32_t> inputs, targets;  // (rows, T)
  std::vector<int32_t> positions;        // (rows, T) when packed, else empty
};
DenseRows Dense(const RowSet& set) {
  DenseRows d;
  d.rows = set.rows();
  const size_t t = static_cast<size_t>(set.seq_len());
  d.inputs.resize(d.rows * t);
  d.targets.resize(d.rows * t);
  d.positions.resize(set.packed() ? d.rows * t : 0);
  for (int64_t r = 0; r < d.rows; ++r) {
    set.FillRow(r, d.inputs.data() + r * t, d.targets.data() + r * t,
                set.packed() ? d.positions.data() + r * t : nullptr);
  }
  return d;
}

InstructionOptions Options(const std::string& path, InstructionFormat format, int seq_len,
                           const Tokenizer& t) {
  InstructionOptions o;
  o.path = path;
  o.format = format;
  o.seq_len = seq_len;
  o.vocab_size = t.vocab_size();
  return o;
}

// prompt-completion, plain: BOS + prompt + completion + EOS, trained on the
// completion and the EOS only; padding after the end is ignored.
TEST(InstructionData, PromptTokensAreMaskedAndTheResponseAndEosAreTrained) {
  auto t = Llama3();
  ScratchDir dir;
  const std::string path = dir.File("pc.jsonl");
  WriteBytes(path, R"({"prompt": "Question: what is two plus two?\n", "completion": "four"})"
                   "\n\n");
  auto data = LoadInstructionData(Options(path, InstructionFormat::kPromptCompletion, 40, *t), *t);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const std::vector<int32_t> prompt = Encode(*t, "Question: what is two plus two?\n");
  const std::vector<int32_t> answer = Encode(*t, "four");
  std::vector<int32_t> ids = {*t->bos_token()};
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  ids.insert(ids.end(), answer.begin(), answer.end());
  ids.push_back(*t->eos_token());
  ASSERT_LE(ids.size(), 41u);
  const DenseRows rows = Dense(data->rows);
  ASSERT_EQ(rows.rows, 1);
  for (size_t j = 0; j + 1 < ids.size(); ++j) {
    EXPECT_EQ(rows.inputs[j], ids[j]) << j;
    const bool response = j + 1 > prompt.size();  // target j is ids[j + 1]
    EXPECT_EQ(rows.targets[j], response ? ids[j + 1] : kIgnoreTarget) << j;
  }
  for (size_t j = ids.size() - 1; j < 40; ++j) EXPECT_EQ(rows.targets[j], kIgnoreTarget) << j;
  EXPECT_EQ(data->stats.trained_tokens, static_cast<int64_t>(answer.size() + 1));
  EXPECT_EQ(data->stats.tokens, static_cast<int64_t>(ids.size() - 1));
  EXPECT_EQ(data->stats.samples, 1);
  EXPECT_EQ(data->stats.chat_template, "");
}

TEST(InstructionData, AlpacaIsRenderedWithStanfordsPromptWithOrWithoutInput) {
  auto t = Llama3();
  ScratchDir dir;
  const std::string path = dir.File("alpaca.jsonl");
  WriteBytes(path, R"({"instruction": "Add.", "input": "2 and 3", "output": "5"})"
                   "\n"
                   R"({"instruction": "Say hi.", "output": "hi"})"
                   "\n");
  auto data = LoadInstructionData(Options(path, InstructionFormat::kAlpaca, 256, *t), *t);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const DenseRows rows = Dense(data->rows);
  ASSERT_EQ(rows.rows, 2);
  const auto row_text = [&](int r) {
    std::vector<int32_t> ids(rows.inputs.begin() + r * 256, rows.inputs.begin() + (r + 1) * 256);
    return t->Decode(ids);
  };
  EXPECT_NE(row_text(0).find("paired with an input that provides further context. Write a "
                             "response that appropriately completes the request.\n\n### "
                             "Instruction:\nAdd.\n\n### Input:\n2 and 3\n\n### Response:\n5"),
            std::string::npos)
      << row_text(0);
  EXPECT_NE(row_text(1).find("Below is an instruction that describes a task. Write a response "
                             "that appropriately completes the request.\n\n### Instruction:\n"
                             "Say hi.\n\n### Response:\nhi"),
            std::string::npos)
      << row_text(1);
  // Named, a chat template renders it as a conversation instead.
  InstructionOptions chat = Options(path, InstructionFormat::kAlpaca, 256, *t);
  chat.chat_template = ChatTemplateKind::kLlama3;
  auto as_chat = LoadInstructionData(chat, *t);
  ASSERT_TRUE(as_chat.ok()) << as_chat.status().ToString();
  const DenseRows chat_rows = Dense(as_chat->rows);
  std::vector<int32_t> ids(chat_rows.inputs.begin(), chat_rows.inputs.begin() + 256);
  EXPECT_NE(t->Decode(ids).find("<|start_header_id|>user<|end_header_id|>\n\nAdd.\n\n2 and 3"
                                "<|eot_id|>"),
            std::string::npos)
      << t->Decode(ids);
  EXPECT_EQ(as_chat->stats.chat_template, "llama3");
}

TEST(InstructionData, LongSamplesAreTruncatedOrDroppedAndCounted) {
  auto t = Llama3();
  ScratchDir dir;
  const std::string path = dir.File("chat.jsonl");
  const std::string long_answer(400, 'x');
  WriteBytes(
      path,
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ")" +
          long_answer + R"("}]})" + "\n" + R"({"messages": [{"role": "user", "content": ")" +
          long_answer + R"("}, {"role": "assistant", "content": "ok"}]})" + "\n");
  InstructionOptions o = Options(path, InstructionFormat::kChat, 32, *t);
  auto truncated = LoadInstructionData(o, *t);
  ASSERT_TRUE(truncated.ok()) << truncated.status().ToString();
  EXPECT_EQ(truncated->stats.samples, 3);
  EXPECT_EQ(truncated->stats.kept, 2);
  EXPECT_EQ(truncated->stats.truncated, 1);          // the long answer, cut
  EXPECT_EQ(truncated->stats.dropped_untrained, 1);  // the long question: no answer within 32
  EXPECT_EQ(truncated->stats.dropped_long, 0);
  EXPECT_EQ(truncated->rows.rows(), 2);
  o.drop_long = true;
  auto dropped = LoadInstructionData(o, *t);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(dropped->stats.kept, 1);
  EXPECT_EQ(dropped->stats.dropped_long, 2);
  EXPECT_EQ(dropped->stats.truncated, 0);

  // Nothing left at all is an error that gives the counts.
  o.seq_len = 4;
  auto none = LoadInstructionData(o, *t);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no sample to train on (3 read"), std::string::npos)
      << none.status().message();
}

TEST(InstructionData, MalformedLinesNameTheLineAndTheField) {
  auto t = Llama3();
  ScratchDir dir;
  const std::string good = R"({"prompt": "a", "completion": "b"})";
  struct Case {
    std::string line;
    InstructionFormat format;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{not json", InstructionFormat::kPromptCompletion, "bad.jsonl:2"},
      {"[1, 2]", InstructionFormat::kPromptCompletion, "bad.jsonl:2: expected a JSON object"},
      {R"({"prompt": "a"})", InstructionFormat::kPromptCompletion,
       "bad.jsonl:2: no \"completion\" field"},
      {R"({"prompt": 7, "completion": "b"})", InstructionFormat::kPromptCompletion,
       "bad.jsonl:2: \"prompt\" is a number, not a string"},
      {R"({"instruction": "a"})", InstructionFormat::kAlpaca, "bad.jsonl:2: no \"output\" field"},
      {R"({"messages": {}})", InstructionFormat::kChat, "\"messages\" is a object, not an array"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]})",
       InstructionFormat::kChat, "bad.jsonl:2: messages[1]: no \"content\" field"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]})",
       InstructionFormat::kChat, "bad.jsonl:2: messages[1].role is \"bot\""},
      {R"({"messages": [{"role": "user", "content": "a\ud800"}, {"role": "assistant", "content": "b"}]})",
       InstructionFormat::kChat, "bad.jsonl:2"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.File("bad.jsonl");
    const std::string first =
        c.format == InstructionFormat::kChat
            ? R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
        : c.format == InstructionFormat::kAlpaca ? R"({"instruction": "a", "output": "b"})"
                                                 : good;
    WriteBytes(path, first + "\n" + c.line + "\n");
    auto data = LoadInstructionData(Options(path, c.format, 32, *t), *t);
    ASSERT_FALSE(data.ok()) << c.line;
    EXPECT_NE(data.status().message().find(c.expect), std::string::npos)
        << "expected \"" << c.expect << "\" in: " << data.status().message();
  }
  // The model's vocabulary smaller than the tokenizer's: the id is named.
  const std::string path = dir.File("ok.jsonl");
  WriteBytes(path, good + "\n");
  InstructionOptions small = Options(path, InstructionFormat::kPromptCompletion, 32, *t);
  small.vocab_size = 300;
  auto data = LoadInstructionData(small, *t);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("outside the model's vocabulary of 300"),
            std::string::npos)
      << data.status().message();
}

TEST(InstructionData, ChatNeedsATemplateFromTheTokenizerOrByName) {
  auto byte = LoadTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  ScratchDir dir;
  const std::string path = dir.File("chat.jsonl");
  WriteBytes(
      path,
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"
      "\n");
  auto data = LoadInstructionData(Options(path, InstructionFormat::kChat, 32, **byte), **byte);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("--chat-template"), std::string::npos)
      << data.status().message();
  EXPECT_NE(data.status().message().find("chat.jsonl"), std::string::npos);
}

TEST(InstructionData, RowsAreServedWholeSplitForEvalAndResumable) {
  // Ten rows of 3: inputs r*10 + j, targets the next id but the last.
  const auto rows = [] {
    RowSet set("rows", 3, /*packed=*/false, /*pad=*/0);
    for (int r = 0; r < 10; ++r) {
      set.Add(std::vector<int32_t>{r * 10, r * 10 + 1, r * 10 + 2, r * 10 + 3},
              {false, true, true, false});
    }
    set.Finish();
    return set;
  };
  DataLoaderOptions o;
  o.batch = 2;
  o.seq_len = 3;
  o.shuffle = false;
  o.eval_fraction = 0.2;  // 2 rows
  auto loader = DataLoader::CreateFromRows(rows(), o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ(loader->batches_per_epoch(), 4);
  EXPECT_EQ(loader->num_eval_batches(), 1);
  TokenBatch b;
  loader->Next(&b);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{1, 2, kIgnoreTarget, 11, 12, kIgnoreTarget}));
  loader->EvalBatch(0, &b);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{80, 81, 82, 90, 91, 92}));

  // Shuffled: every train row once per epoch, and a saved position resumes.
  o.shuffle = true;
  o.seed = 7;
  auto shuffled = DataLoader::CreateFromRows(rows(), o);
  ASSERT_TRUE(shuffled.ok());
  std::vector<int32_t> firsts;
  for (int k = 0; k < 4; ++k) {
    shuffled->Next(&b);
    firsts.push_back(b.inputs[0] / 10);
    firsts.push_back(b.inputs[3] / 10);
  }
  std::sort(firsts.begin(), firsts.end());
  EXPECT_EQ(firsts, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  shuffled->Next(&b);
  const nlohmann::json state = shuffled->SaveState();
  TokenBatch expected, resumed;
  shuffled->Next(&expected);
  auto again = DataLoader::CreateFromRows(rows(), o);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->RestoreState(state).ok());
  again->Next(&resumed);
  EXPECT_EQ(resumed.inputs, expected.inputs);

  // Too few rows, or rows of another length, are refused by name.
  o.batch = 9;
  auto few = DataLoader::CreateFromRows(rows(), o);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("rows"), std::string::npos);
  o.batch = 2;
  o.seq_len = 4;
  auto wrong = DataLoader::CreateFromRows(rows(), o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("the rows are 3 tokens long but seq_len is 4"),
            std::string::npos);
}

}  // namespace
}  // namespace tierflow

namespace tierflow {
namespace {

// Packed: samples end to end in file order, a sample that does not fit
// starting the next row, positions restarting per sample and across the
// padding at a row's end; the targets are the unpacked rows' targets.
TEST(InstructionData, PackingLaysSamplesEndToEndWithRestartingPositions) {
  auto t = LoadTokenizer(std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/llama3");
  ASSERT_TRUE(t.ok());
  testing_data::ScratchDir dir;
  const std::string path = dir.File("pc.jsonl");
  std::string lines;
  for (const char* answer : {"one", "two two", "three three three", "four", "five five"}) {
    lines += nlohmann::json{{"prompt", "Q: say it\n"}, {"completion", answer}}.dump() + "\n";
  }
  testing_data::WriteBytes(path, lines);
  InstructionOptions o;
  o.path = path;
  o.format = InstructionFormat::kPromptCompletion;
  o.seq_len = 40;
  o.vocab_size = (*t)->vocab_size();
  auto plain = LoadInstructionData(o, **t);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  o.packing = true;
  auto packed = LoadInstructionData(o, **t);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  const DenseRows plain_rows = Dense(plain->rows);
  const DenseRows packed_rows = Dense(packed->rows);
  EXPECT_TRUE(plain_rows.positions.empty());
  ASSERT_EQ(plain_rows.rows, 5);
  ASSERT_LT(packed_rows.rows, 5);
  EXPECT_EQ(packed->stats.trained_tokens, plain->stats.trained_tokens);

  // The expected layout, built independently from the unpacked rows: a
  // sample fills up to its last trained target (the EOS); greedy rows of T.
  const int T = 40;
  std::vector<int32_t> in, tg, pos;
  int used = T;
  const auto pad_row = [&] {
    for (int c = used, p = 0; c < T; ++c, ++p) {
      pos.push_back(p);
      in.push_back(-1);  // any token
      tg.push_back(kIgnoreTarget);
    }
  };
  for (int i = 0; i < 5; ++i) {
    int n = 0;
    for (int c = 0; c < T; ++c) {
      if (plain_rows.targets[i * T + c] != kIgnoreTarget) n = c + 1;
    }
    if (used + n > T) {
      if (!in.empty()) pad_row();
      used = 0;
    }
    for (int c = 0; c < n; ++c) {
      in.push_back(plain_rows.inputs[i * T + c]);
      tg.push_back(plain_rows.targets[i * T + c]);
      pos.push_back(c);
    }
    used += n;
  }
  pad_row();
  ASSERT_EQ(static_cast<int64_t>(pos.size()), packed_rows.rows * T);
  EXPECT_EQ(packed_rows.positions, pos);
  EXPECT_EQ(packed_rows.targets, tg);
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k] >= 0) {
      EXPECT_EQ(packed_rows.inputs[k], in[k]) << k;
    }
  }
}

}  // namespace
}  // namespace tierflow

namespace tierflow {
namespace {

using testing_data::ScratchDir;
using testing_data::WriteBytes;

std::string PromptCompletionLine(const std::string& prompt, const std::string& completion) {
  return nlohmann::json{{"prompt", prompt}, {"completion", completion}}.dump();
}

InstructionOptions ByteOptions(const std::string& path, int seq_len, const Tokenizer& t) {
  InstructionOptions o;
  o.path = path;
  o.format = InstructionFormat::kPromptCompletion;
  o.seq_len = seq_len;
  o.vocab_size = t.vocab_size();
  return o;
}

// Issue 40: "one 50 MB line takes 1 GB" (the file read whole, the line
// parsed and tokenized before anything was checked). A line over the bound,
// 16 MiB by default, is refused by number and size while it is read: this
// one is not even JSON, and the refusal, not a parse error, comes back.
TEST(InstructionData, RefusesAnOverlongLineBeforeParsing) {
  auto byte = LoadTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  ScratchDir dir;
  const std::string path = dir.File("long.jsonl");
  const std::string good = PromptCompletionLine("a", "b");
  WriteBytes(path, good + "\n" + std::string((size_t{16} << 20) + 1, '{') + "\n" + good + "\n");
  auto data = LoadInstructionData(ByteOptions(path, 32, **byte), **byte);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(data.status().message().find(
                "long.jsonl:2 is 16777217 bytes long, more than the 16777216 accepted per line"),
            std::string::npos)
      << data.status().message();
  EXPECT_NE(data.status().message().find("--max-sample-bytes"), std::string::npos)
      << data.status().message();
}

// Issue 40: "200k tiny samples at --seq-len 256 take 609 MB" (every sample a
// padded row of ids, targets and positions). The rows are kept as their
// tokens: what the loader holds (and the planner counts) is the same at
// seq_len 256 and 8192, about four bytes a token.
TEST(InstructionData, MemoryDoesNotScaleWithPadding) {
  auto byte = LoadTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  ScratchDir dir;
  const std::string path = dir.File("tiny.jsonl");
  std::string lines;
  for (int i = 0; i < 2000; ++i) {
    lines +=
        PromptCompletionLine("Q" + std::to_string(i) + ": hi?\n", "ok " + std::to_string(i)) + "\n";
  }
  WriteBytes(path, lines);
  for (bool packing : {false, true}) {
    std::vector<uint64_t> bytes;
    for (int seq_len : {256, 8192}) {
      InstructionOptions o = ByteOptions(path, seq_len, **byte);
      o.packing = packing;
      auto data = LoadInstructionData(o, **byte);
      ASSERT_TRUE(data.ok()) << data.status().ToString();
      const InstructionStats s = data->stats;
      ASSERT_EQ(s.kept, 2000);
      ASSERT_EQ(s.truncated, 0);
      DataLoaderOptions lo;
      lo.batch = 1;
      lo.seq_len = seq_len;
      lo.eval_fraction = 0;
      auto loader = DataLoader::CreateFromRows(std::move(data->rows), lo);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      bytes.push_back(loader->MemoryBytes());
      // Each sample's ids (one more than its input slots), with its end;
      // each row's end (packed) and place in the shuffled order.
      const uint64_t held = static_cast<uint64_t>(s.tokens + s.kept) * 4 +
                            static_cast<uint64_t>(s.kept) * 8 +
                            static_cast<uint64_t>(s.rows) * (packing ? 16 : 8);
      EXPECT_LE(bytes.back(), held + 4096) << "seq_len " << seq_len << ", packing " << packing;
    }
    if (!packing) {
      EXPECT_EQ(bytes[0], bytes[1]);
    }
  }
}

// The option behind the refusal above: a line of exactly max_sample_bytes
// is read, one byte more is refused; the option's own range is checked.
TEST(InstructionData, MaxSampleBytesBoundsEachLine) {
  auto byte = LoadTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  ScratchDir dir;
  const std::string path = dir.File("pc.jsonl");
  const std::string line = PromptCompletionLine("Question?", "Answer.");
  WriteBytes(path, line + "\n" + line + "x\n");
  InstructionOptions o = ByteOptions(path, 64, **byte);
  o.max_sample_bytes = line.size() + 1;
  auto read = LoadInstructionData(o, **byte);  // line 2 is read, and is not JSON
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("pc.jsonl:2"), std::string::npos);
  EXPECT_EQ(read.status().message().find("accepted per line"), std::string::npos);
  o.max_sample_bytes = line.size();
  auto data = LoadInstructionData(o, **byte);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("pc.jsonl:2 is " + std::to_string(line.size() + 1) +
                                         " bytes long, more than the " +
                                         std::to_string(line.size()) + " accepted per line"),
            std::string::npos)
      << data.status().message();
  for (size_t bad : {size_t{0}, kMaxSampleBytesLimit + 1}) {
    o.max_sample_bytes = bad;
    auto refused = LoadInstructionData(o, **byte);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("the longest sample accepted is"), std::string::npos)
        << refused.status().message();
  }
}

// The budget is checked before each sample is added, so the rows never grow
// past it: a file that does not fit ends in an error naming the line
// reached, the budget and where it came from, and the reading stops there
// (the malformed last line is never parsed).
TEST(InstructionData, IsHeldToItsMemoryBudgetWhileRead) {
  auto byte = LoadTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  ScratchDir dir;
  const std::string path = dir.File("pc.jsonl");
  std::string lines;
  for (int i = 0; i < 1000; ++i) {
    lines += PromptCompletionLine(std::string(100, 'q'), "answer " + std::to_string(i)) + "\n";
  }
  WriteBytes(path, lines + "{not json\n");
  InstructionOptions o = ByteOptions(path, 256, **byte);
  o.memory_budget_bytes = 64 << 10;
  o.memory_budget_source = "the test's";
  auto data = LoadInstructionData(o, **byte);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kOutOfMemory) << data.status().ToString();
  const std::string& m = data.status().message();
  EXPECT_NE(m.find("pc.jsonl:"), std::string::npos) << m;
  EXPECT_NE(m.find("more than 65536 bytes (64.00 KiB), its host memory budget (the test's)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("train on a part of the file"), std::string::npos) << m;
  // Within a budget it fits, the same file reads up to its malformed line.
  o.memory_budget_bytes = 1 << 20;
  auto roomy = LoadInstructionData(o, **byte);
  ASSERT_FALSE(roomy.ok());
  EXPECT_NE(roomy.status().message().find("pc.jsonl:1001"), std::string::npos)
      << roomy.status().message();
}

}  // namespace
}  // namespace tierflow

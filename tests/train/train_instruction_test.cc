// Fine-tuning on chat data end to end: a tiny Llama 3-style model with the
// Llama 3 tokenizer fixture, a chat JSONL, and `tierflow train --format chat`.
// The loss the run reports must equal the mean cross-entropy over the
// response positions only (the assistant's tokens and its <|eot_id|>), over
// both micro-batches of the step together, computed here independently: the
// ids are built by hand from the template's pieces, and each response
// position's cross-entropy is taken on its own from the model. Packed into
// one row (--packing), the two conversations give the same loss.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"
#include "tests/model/model_test_util.h"

#include "data/instruction_data.h"
#include "data/tokenizer.h"
#include "model/hf_model.h"
#include "model/transformer.h"
#include "train/trainer.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_util::DirectUnitAccess;
using testing_util::InitialFlat;
using testing_util::MakeCpuDevice;

constexpr int kSeqLen = 64;

struct Conversation {
  std::string user, assistant;
};

// Llama 3's template by hand: <|begin_of_text|>, then per message
// <|start_header_id|>ROLE<|end_header_id|> "\n\n" CONTENT <|eot_id|>. Returns
// the ids and marks the assistant's content tokens and its <|eot_id|>.
std::vector<int32_t> Llama3Ids(const Tokenizer& t, const Conversation& c,
                               std::vector<bool>* response) {
  const auto id = [&](const char* text) { return *t.TokenId(text); };
  std::vector<int32_t> ids = {id("<|begin_of_text|>")};
  response->assign(1, false);
  const auto add = [&](const std::vector<int32_t>& part, bool trained) {
    ids.insert(ids.end(), part.begin(), part.end());
    response->insert(response->end(), part.size(), trained);
  };
  for (const auto& [role, content] :
       {std::pair{std::string("user"), c.user}, std::pair{std::string("assistant"), c.assistant}}) {
    const bool assistant = role == "assistant";
    add({id("<|start_header_id|>")}, false);
    add(*t.Encode(role), false);
    add({id("<|end_header_id|>")}, false);
    add(*t.Encode("\n\n"), false);
    add(*t.Encode(content), assistant);
    add({id("<|eot_id|>")}, assistant);
  }
  return ids;
}

// A tiny Llama 3-shaped model directory with the Llama 3 tokenizer fixture
// and seeded weights (init_std wide enough that positions' losses differ).
std::string MakeModelDir(const std::string& model_dir, const Tokenizer& t) {
  const std::string fixture = std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/llama3";
  fs::create_directories(model_dir);
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                           {"model_type", "llama"},
                           {"vocab_size", t.vocab_size()},
                           {"hidden_size", 32},
                           {"intermediate_size", 64},
                           {"num_hidden_layers", 2},
                           {"num_attention_heads", 4},
                           {"num_key_value_heads", 2},
                           {"max_position_embeddings", 128},
                           {"rms_norm_eps", 1e-5},
                           {"rope_theta", 500000.0},
                           {"tie_word_embeddings", false},
                           {"torch_dtype", "float32"}};
  std::ofstream(model_dir + "/config.json") << config.dump(2);
  auto from_config = ResolveTrainableModel(model_dir + "/config.json");
  EXPECT_TRUE(from_config.ok()) << from_config.status().ToString();
  auto device = MakeCpuDevice();
  TransformerInit wide;
  wide.init_std = 0.5f;
  auto seeded = TransformerModel::Create(*device, from_config->config,
                                         {.batch = 1, .seq_len = 8, .dtype = DType::kF32}, wide);
  EXPECT_TRUE(seeded.ok()) << seeded.status().ToString();
  const std::vector<float> weights = InitialFlat(**seeded);
  HfModelSaveOptions save;
  save.dtype = DType::kF32;
  save.base_config_json = config.dump(2);
  EXPECT_TRUE(SaveHfModel(model_dir, (*seeded)->layout(), weights.data(), save).ok());
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fixture + "/" + name, model_dir + "/" + name);
  }
  return model_dir;
}

std::map<int64_t, double> LossesByStep(const std::string& metrics) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// A chat run, packed and shuffled, stopped at a checkpoint and resumed,
// replays the same rows: the same per-step losses and final weights, bit
// for bit, as the run straight through.
TEST(TrainInstruction, AChatRunResumesBitExactly) {
  testing_common::ScratchDir dir("tierflow-instruct-resume-");
  auto tokenizer =
      LoadTokenizer(std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/llama3");
  ASSERT_TRUE(tokenizer.ok());
  const std::string model = MakeModelDir(dir / "model", **tokenizer);
  {
    std::ofstream data(dir / "chat.jsonl");
    for (int i = 0; i < 24; ++i) {
      data << nlohmann::json{{"messages",
                              {{{"role", "user"}, {"content", "Count to " + std::to_string(i)}},
                               {{"role", "assistant"},
                                {"content", std::string(static_cast<size_t>(i % 5) + 1, 'x') +
                                                " done " + std::to_string(i)}}}}}
                  .dump()
           << "\n";
    }
  }
  const auto config = [&](const std::string& out, int64_t steps) {
    TrainConfig c;
    c.model = model;
    c.data = dir / "chat.jsonl";
    c.data_format = TrainDataFormat::kChat;
    c.packing = true;
    c.micro_batch = 1;
    c.grad_accum = 2;
    c.seq_len = 64;
    c.steps = steps;
    c.checkpoint_every = 2;
    c.eval_every = 0;
    c.eval_fraction = 0;
    c.dtype = DType::kF32;
    c.lr = 1e-2f;
    c.offload = OffloadPlacement::kHost;
    c.device.choice = DeviceChoice::kCpu;
    c.out_dir = out;
    return c;
  };
  TrainReporter quiet;
  ASSERT_TRUE(RunTraining(config(dir / "straight", 4), quiet).ok());
  ASSERT_TRUE(RunTraining(config(dir / "resumed", 2), quiet).ok());
  TrainConfig rest = config(dir / "resumed", 4);
  rest.resume = true;
  auto r = RunTraining(rest, quiet);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto a = LossesByStep(dir / "straight/metrics.jsonl");
  const auto b = LossesByStep(dir / "resumed/metrics.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (int64_t s = 1; s <= 4; ++s) EXPECT_EQ(a.at(s), b.at(s)) << "step " << s;
  EXPECT_NE(a.at(1), a.at(4));
  std::ifstream x(dir / "straight/model/model.safetensors", std::ios::binary),
      y(dir / "resumed/model/model.safetensors", std::ios::binary);
  const std::string xs((std::istreambuf_iterator<char>(x)), std::istreambuf_iterator<char>());
  const std::string ys((std::istreambuf_iterator<char>(y)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(xs.empty());
  EXPECT_TRUE(xs == ys);
}

TEST(TrainInstruction, TheReportedLossIsTheMeanCrossEntropyOverResponseTokensOnly) {
  testing_common::ScratchDir dir("tierflow-instruct-");
  const std::string fixture = std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/llama3";
  auto tokenizer = LoadTokenizer(fixture);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const Tokenizer& t = **tokenizer;

  const std::string model_dir = MakeModelDir(dir / "model", t);
  const std::vector<Conversation> conversations = {
      {"What is the capital of France?", "Paris is the capital of France."},
      {"Name two primes.", "2 and 3."}};
  {
    std::ofstream data(dir / "chat.jsonl");
    for (const Conversation& c : conversations) {
      data << nlohmann::json{{"messages",
                              {{{"role", "user"}, {"content", c.user}},
                               {{"role", "assistant"}, {"content", c.assistant}}}}}
                  .dump()
           << "\n";
    }
  }

  TrainConfig c;
  c.model = model_dir;
  c.data = dir / "chat.jsonl";
  c.data_format = TrainDataFormat::kChat;
  c.micro_batch = 1;
  c.grad_accum = 2;  // one conversation per micro-batch, one step
  c.seq_len = kSeqLen;
  c.steps = 1;
  c.shuffle = false;
  c.eval_fraction = 0;
  c.eval_every = 0;
  c.dtype = DType::kF32;
  c.lr = 1e-30f;  // the saved model keeps the initial weights, bit for bit
  c.offload = OffloadPlacement::kHost;
  c.device.choice = DeviceChoice::kCpu;
  c.out_dir = dir / "out";
  struct Notes : TrainReporter {
    void OnNote(const std::string& note) override { notes += note + "\n"; }
    std::string notes;
  };
  Notes reporter;
  auto run = RunTraining(c, reporter);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_NE(reporter.notes.find("(chat, llama3 chat template): 2 samples, 2 kept"),
            std::string::npos)
      << reporter.notes;
  const double reported = run->first_loss;

  // Independently: each response position's cross-entropy under the initial
  // weights (read back from the saved model), averaged over both samples.
  auto resolved = ResolveTrainableModel(dir / "out/model");
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  TrainShape shape{.batch = 1, .seq_len = kSeqLen, .dtype = DType::kF32};
  TransformerInit init;
  init.weights_dir = resolved->weights_dir;
  auto model = TransformerModel::Create(*device, resolved->config, shape, init);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  DirectUnitAccess access(*device, *stream, (*model)->Units(), DType::kF32);
  ASSERT_TRUE(access.SetWeights(InitialFlat(**model)).ok());

  double sum = 0, all_positions_sum = 0;
  int64_t count = 0, all_positions = 0;
  for (const Conversation& conv : conversations) {
    std::vector<bool> response;
    const std::vector<int32_t> ids = Llama3Ids(t, conv, &response);
    ASSERT_LE(ids.size(), static_cast<size_t>(kSeqLen) + 1);
    std::vector<int32_t> inputs(kSeqLen, *t.eos_token());
    std::copy(ids.begin(), ids.end() - 1, inputs.begin());
    const auto cross_entropy = [&](size_t j) {
      std::vector<int32_t> targets(kSeqLen, -100);
      targets[j] = ids[j + 1];
      MicroBatch mb;
      mb.inputs = inputs.data();
      mb.targets = targets.data();
      mb.batch = 1;
      mb.seq_len = kSeqLen;
      EXPECT_TRUE((*model)->ForwardBackward(*stream, mb, 1.0f, access).ok());
      EXPECT_TRUE(stream->Synchronize().ok());
      return static_cast<double>(*(*model)->LastLoss());
    };
    for (size_t j = 0; j + 1 < ids.size(); ++j) {
      const double ce = cross_entropy(j);
      all_positions_sum += ce;
      ++all_positions;
      if (response[j + 1]) {
        sum += ce;
        ++count;
      }
    }
  }
  ASSERT_GT(count, 4);
  const double expected = sum / static_cast<double>(count);
  EXPECT_NEAR(reported, expected, 2e-5 * expected);

  // Packed, both conversations share one row (one micro-batch): the same
  // mean over the same response tokens.
  TrainConfig packed = c;
  packed.packing = true;
  packed.grad_accum = 1;
  packed.seq_len = 128;  // room for both (67 input tokens)
  packed.out_dir = dir / "out-packed";
  Notes packed_notes;
  auto packed_run = RunTraining(packed, packed_notes);
  ASSERT_TRUE(packed_run.ok()) << packed_run.status().ToString();
  EXPECT_NE(packed_notes.notes.find("in 1 packed rows of 128"), std::string::npos)
      << packed_notes.notes;
  EXPECT_NEAR(packed_run->first_loss, expected, 2e-5 * expected);
  // The mask matters: the mean over every position is another number.
  EXPECT_GT(std::fabs(all_positions_sum / static_cast<double>(all_positions) - expected),
            1e-3 * expected);
}

// The config's default and range are the data layer's (train_config.h stays
// free of the tokenizers' headers, so they are tied here).
TEST(TrainInstruction, MaxSampleBytesDefaultAndRangeAreTheDataLayers) {
  TrainConfig c;
  EXPECT_EQ(c.max_sample_bytes, kDefaultMaxSampleBytes);
  c.data = "samples.jsonl";
  c.data_format = TrainDataFormat::kChat;
  c.max_sample_bytes = kMaxSampleBytesLimit;
  EXPECT_TRUE(ValidateTrainConfig(c).ok()) << ValidateTrainConfig(c).ToString();
  c.max_sample_bytes = kMaxSampleBytesLimit + 1;
  EXPECT_FALSE(ValidateTrainConfig(c).ok());
}

// Issue 40: instruction data was read whole and padded before any budget
// was checked, so a dataset too large for the host ended in the OOM killer.
// It is now held to a budget from the host's usable memory (here 1 GiB and
// 256 KiB, so 256 KiB once the process's 1 GiB is set aside) while it is
// read: the run is refused at the line that would pass it, naming the file,
// the budget and where it came from, and the file is not read further (its
// malformed last line is never reached).
TEST(TrainInstruction, RefusesADatasetLargerThanItsHostBudget) {
  testing_common::ScratchDir dir("tierflow-instruct-budget-");
  {
    std::ofstream data(dir / "data.jsonl");
    for (int i = 0; i < 3000; ++i) {
      data << nlohmann::json{{"prompt", "Question " + std::to_string(i) + ": " +
                                            std::string(40, 'q') + "?\n"},
                             {"completion", "Answer " + std::to_string(i)}}
                  .dump()
           << "\n";
    }
    data << "{not json\n";
  }
  TrainConfig c;
  c.model = "tiny-llama";  // the byte tokenizer: a token a byte
  c.data = dir / "data.jsonl";
  c.data_format = TrainDataFormat::kPromptCompletion;
  c.seq_len = 128;
  c.steps = 1;
  c.eval_every = 0;
  c.offload = OffloadPlacement::kHost;
  c.device.choice = DeviceChoice::kCpu;
  c.out_dir = dir / "out";
  TrainHooks hooks;
  hooks.host_memory_bytes = (uint64_t{1} << 30) + (uint64_t{256} << 10);
  TrainReporter quiet;
  auto run = RunTraining(c, quiet, nullptr, &hooks);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kOutOfMemory) << run.status().ToString();
  const std::string& m = run.status().message();
  EXPECT_NE(m.find("data.jsonl:"), std::string::npos) << m;
  EXPECT_NE(m.find("more than 262144 bytes (256.00 KiB), its host memory budget (1.00 GiB of "
                   "usable host memory, less 1.00 GiB for the process)"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("data.jsonl:3001"), std::string::npos) << m;
}

}  // namespace
}  // namespace tierflow

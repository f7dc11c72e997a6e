// `tierflow tokenize` and `tierflow bench tokenizer` through the binary: the
// ids of a fixture text are the reference's, --decode gives the text back,
// --special adds the BOS, a bad id exits 2 naming it, and the bench counts
// the same tokens the library gives.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/run_command.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

using Result = testing_common::CommandOutput;

// Runs `tierflow ARGS < INPUT_FILE`, capturing stdout and stderr.
Result RunTierflow(const std::string& args, const std::string& input_file) {
  return testing_common::RunCommand(std::string(TIERFLOW_BINARY) + " " + args + " < '" +
                                    input_file + "' 2>&1");
}

std::string Fixture(const std::string& config) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/" + config;
}

TEST(TokenizeCli, IdsDecodeSpecialTokensAndErrors) {
  testing_common::ScratchDir dir("tierflow-tokenize-");
  std::ifstream in(Fixture("llama3") + "/expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const nlohmann::json* mixed = nullptr;
  for (const auto& c : expected["cases"]) {
    if (c["name"] == "long_mixed_paragraph") mixed = &c;
  }
  ASSERT_NE(mixed, nullptr);
  const std::string text_file = dir / "text.txt";
  std::ofstream(text_file) << (*mixed)["text"].get<std::string>();

  const Result ids =
      RunTierflow("tokenize --tokenizer " + Fixture("llama3") + " --json", text_file);
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  EXPECT_EQ(nlohmann::json::parse(ids.output), (*mixed)["ids"]);

  const Result with = RunTierflow(
      "tokenize --tokenizer " + Fixture("llama3") + " --json --special --text-file " + text_file,
      "/dev/null");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  EXPECT_EQ(nlohmann::json::parse(with.output), (*mixed)["ids_with_special"]);

  const std::string ids_file = dir / "ids.txt";
  std::ofstream(ids_file) << ids.output;
  const Result text =
      RunTierflow("tokenize --tokenizer " + Fixture("llama3") + " --decode", ids_file);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output, (*mixed)["text"].get<std::string>());

  std::ofstream(ids_file) << "1 2 999999";
  const Result bad =
      RunTierflow("tokenize --tokenizer " + Fixture("llama3") + " --decode", ids_file);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("item 3 (\"999999\") is outside the vocabulary"), std::string::npos)
      << bad.output;
  const Result missing = RunTierflow("tokenize --tokenizer " + (dir / "nope"), text_file);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("nope"), std::string::npos) << missing.output;

  // A SentencePiece model through the same command.
  const Result spm =
      RunTierflow("tokenize --tokenizer " + Fixture("spm") + "/tokenizer.model --json", text_file);
  EXPECT_EQ(spm.exit_code, 0) << spm.output;
}

TEST(TokenizeCli, TheBenchCountsTheTokensTheTokenizerGives) {
  testing_common::ScratchDir dir("tierflow-tokbench-");
  const std::string text_file = dir / "text.txt";
  {
    std::ofstream f(text_file);
    for (int i = 0; i < 200; ++i) f << "Line " << i << ": the quick brown fox, 你好.\n";
  }
  const Result count =
      RunTierflow("tokenize --tokenizer " + Fixture("qwen2") + " --json", text_file);
  ASSERT_EQ(count.exit_code, 0) << count.output;
  const size_t tokens = nlohmann::json::parse(count.output).size();
  const Result bench =
      RunTierflow("bench tokenizer --tokenizer " + Fixture("qwen2") +
                      " --threads 2 --iterations 1 --json --text-file " + text_file,
                  "/dev/null");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  const nlohmann::json j = nlohmann::json::parse(bench.output);
  // Two chunks cut at a line end tokenize as the whole text does here
  // (every line starts a new piece).
  EXPECT_EQ(j["tokens"].get<size_t>(), tokens);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_GT(j["single_thread_mb_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["all_threads_mb_per_s"].get<double>(), 0.0);
}

}  // namespace
}  // namespace tierflow

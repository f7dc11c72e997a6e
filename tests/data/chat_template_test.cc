// Chat templates checked against Hugging Face's Jinja renderer: for each
// family's tokenizer fixture (tests/data/tokenizers/), chat_expected.json
// holds conversations as transformers.js apply_chat_template renders them
// with the family's real template, and the ids tokenizers 0.23.2 gives that
// text. tierflow's native rendering must produce the same text and ids, and
// train on exactly the assistant contents and the end-of-turn token after each.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/instruction_data.h"
#include "data/tokenizer.h"

namespace tierflow {
namespace {

std::string FixtureDir(const std::string& config) {
  return std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/tokenizers/" + config;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::vector<ChatMessage> Messages(const nlohmann::json& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list) out.push_back({m["role"], m["content"]});
  return out;
}

class ChatFixture : public ::testing::TestWithParam<std::pair<std::string, ChatTemplateKind>> {};

TEST_P(ChatFixture, RendersAndTokenizesAsTheModelsTemplateAndTrainsOnAssistantTurns) {
  const auto& [config, kind] = GetParam();
  auto tokenizer = LoadTokenizer(FixtureDir(config));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto tmpl = DetectChatTemplate((*tokenizer)->chat_template());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  EXPECT_EQ(tmpl->kind, kind);
  const nlohmann::json expected = ReadJson(FixtureDir(config) + "/chat_expected.json");
  ASSERT_GE(expected["cases"].size(), 8u);
  for (const auto& c : expected["cases"]) {
    SCOPED_TRACE(config + "/" + c["name"].get<std::string>());
    RenderStats stats;
    auto parts = RenderChat(*tmpl, Messages(c["messages"]), **tokenizer, &stats);
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    std::string text;
    for (const RenderedPart& p : *parts) {
      text += p.token >= 0 ? (*tokenizer)->Decode(std::vector<int32_t>{p.token}) : p.text;
    }
    EXPECT_EQ(text, c["text"].get<std::string>());
    auto sample = TokenizeRendered(*parts, **tokenizer);
    ASSERT_TRUE(sample.ok()) << sample.status().ToString();
    EXPECT_EQ(sample->ids, c["ids"].get<std::vector<int32_t>>());

    // Trained runs: one per assistant message, each decoding to text that
    // holds the content the template shows, and ending with the end of turn.
    std::vector<std::vector<int32_t>> runs;
    for (size_t i = 0; i < sample->ids.size(); ++i) {
      if (!sample->trained[i]) continue;
      if (i == 0 || !sample->trained[i - 1]) runs.emplace_back();
      runs.back().push_back(sample->ids[i]);
    }
    const auto& spans = c["assistant_spans"];
    ASSERT_EQ(runs.size(), spans.size());
    const std::string rendered = c["text"].get<std::string>();
    for (size_t k = 0; k < runs.size(); ++k) {
      const size_t begin = spans[k][0], end = spans[k][1];
      const std::string content = rendered.substr(begin, end - begin);
      const std::string decoded = (*tokenizer)->Decode(runs[k]);
      EXPECT_NE(decoded.find(content), std::string::npos) << decoded << " lacks " << content;
      const int32_t end_of_turn =
          kind == ChatTemplateKind::kLlama3   ? *(*tokenizer)->TokenId("<|eot_id|>")
          : kind == ChatTemplateKind::kChatMl ? *(*tokenizer)->TokenId("<|im_end|>")
                                              : *(*tokenizer)->eos_token();
      EXPECT_EQ(runs[k].back(), end_of_turn);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ChatFixture,
    ::testing::Values(std::pair{std::string("llama3"), ChatTemplateKind::kLlama3},
                      std::pair{std::string("llama31"), ChatTemplateKind::kLlama3},
                      std::pair{std::string("qwen2"), ChatTemplateKind::kChatMl},
                      std::pair{std::string("llama2"), ChatTemplateKind::kLlama2},
                      std::pair{std::string("mistral"), ChatTemplateKind::kMistral}),
    [](const auto& info) { return info.param.first; });

TEST(ChatTemplate, Llama31sDatePreambleIsReadFromItsTemplate) {
  auto t31 = LoadTokenizer(FixtureDir("llama31"));
  auto t30 = LoadTokenizer(FixtureDir("llama3"));
  ASSERT_TRUE(t31.ok() && t30.ok());
  EXPECT_EQ(DetectChatTemplate((*t31)->chat_template())->llama3_date, "26 Jul 2024");
  EXPECT_EQ(DetectChatTemplate((*t30)->chat_template())->llama3_date, "");
}

TEST(ChatTemplate, QwensDefaultSystemPromptIsReadFromItsTemplate) {
  auto tokenizer = LoadTokenizer(FixtureDir("qwen2"));
  ASSERT_TRUE(tokenizer.ok());
  auto tmpl = DetectChatTemplate((*tokenizer)->chat_template());
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(tmpl->default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplate, UnknownTemplatesRolesAndOrdersAreRefusedByName) {
  auto none = DetectChatTemplate("");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("--chat-template"), std::string::npos);
  auto other = DetectChatTemplate("{% for m in messages %}<<{{ m.content }}>>{% endfor %}");
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("llama3, chatml, llama2, mistral"), std::string::npos);
  EXPECT_FALSE(ParseChatTemplateKind("vicuna").ok());

  auto tokenizer = LoadTokenizer(FixtureDir("llama2"));
  ASSERT_TRUE(tokenizer.ok());
  const ChatTemplate llama2 = TemplateOfKind(ChatTemplateKind::kLlama2);
  auto bad_role = RenderChat(llama2, {{"user", "hi"}, {"robot", "beep"}}, **tokenizer, nullptr);
  EXPECT_NE(bad_role.status().message().find("messages[1].role is \"robot\""), std::string::npos)
      << bad_role.status().message();
  auto no_answer = RenderChat(llama2, {{"user", "hi"}}, **tokenizer, nullptr);
  EXPECT_NE(no_answer.status().message().find("no assistant message"), std::string::npos);
  auto order = RenderChat(llama2, {{"assistant", "hi"}, {"user", "x"}}, **tokenizer, nullptr);
  EXPECT_NE(order.status().message().find("alternating"), std::string::npos)
      << order.status().message();
  // A template whose special tokens the tokenizer lacks is named.
  auto missing = RenderChat(TemplateOfKind(ChatTemplateKind::kLlama3),
                            {{"user", "a"}, {"assistant", "b"}}, **tokenizer, nullptr);
  EXPECT_NE(missing.status().message().find("<|start_header_id|>"), std::string::npos)
      << missing.status().message();
}

TEST(ChatTemplate, MistralsTemplateDropsASystemMessageAndCountsIt) {
  auto tokenizer = LoadTokenizer(FixtureDir("mistral"));
  ASSERT_TRUE(tokenizer.ok());
  RenderStats stats;
  auto parts = RenderChat(TemplateOfKind(ChatTemplateKind::kMistral),
                          {{"system", "Be brief."}, {"user", "hi"}, {"assistant", "hello"}},
                          **tokenizer, &stats);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  EXPECT_EQ(stats.dropped_system_messages, 1);
  for (const RenderedPart& p : *parts) EXPECT_EQ(p.text.find("Be brief"), std::string::npos);
}

}  // namespace
}  // namespace tierflow

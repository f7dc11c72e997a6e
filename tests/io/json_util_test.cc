// ParseJson's depth limit and duplicate-key policy, and JsonExcerpt: the two
// guards every parser of outside JSON relies on (issue 18: a 100000-deep
// file overflowed the stack through parsing, copying and error messages).
#include "io/json_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace tierflow {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string NestedArrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string NestedObjects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"k\":";
  return s + "0" + std::string(depth, '}');
}

TEST(ParseJson, NestingUpToTheLimitParses) {
  Json j;
  ASSERT_TRUE(ParseJsonStrict(NestedArrays(kMaxJsonDepth), "t", &j).ok());
  ASSERT_TRUE(ParseJsonStrict(NestedObjects(kMaxJsonDepth), "t", &j).ok());
  int depth = 0;
  for (const Json* v = &j; v->is_object(); v = &(*v)["k"]) ++depth;
  EXPECT_EQ(depth, kMaxJsonDepth);
}

TEST(ParseJson, OneLevelPastTheLimitIsDataLoss) {
  Json j;
  for (const std::string& text :
       {NestedArrays(kMaxJsonDepth + 1), NestedObjects(kMaxJsonDepth + 1)}) {
    Status s = ParseJsonStrict(text, "thing.json", &j);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), HasSubstr("thing.json"));
    EXPECT_THAT(s.message(), HasSubstr("nested deeper than 64"));
  }
}

TEST(ParseJson, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  Json j;
  // Mixed, unterminated and terminated: each stops at level 65.
  for (const std::string& text :
       {NestedArrays(100000), NestedObjects(100000), std::string(1000000, '['),
        "{\"a\": [{\"b\": " + NestedArrays(100000) + "}]}"}) {
    Status s = ParseJsonStrict(text, "deep", &j);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("nested deeper than"));
  }
}

TEST(ParseJson, TheDepthLimitIsAnOption) {
  Json j;
  JsonParseOptions options;
  options.max_depth = 2;
  EXPECT_TRUE(ParseJson("[[1]]", "t", options, &j).ok());
  EXPECT_FALSE(ParseJson("[[[1]]]", "t", options, &j).ok());
  EXPECT_TRUE(ParseJson("[1]", "t", options, &j).ok());
}

TEST(ParseJson, DuplicateKeysAreErrorsOrLastWinsByOption) {
  Json j;
  Status strict = ParseJsonStrict(R"({"a": {"k": 1, "k": 2}})", "t", &j);
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.message(), HasSubstr("key \"k\" appears twice inside \"a\""));
  JsonParseOptions lenient;
  lenient.reject_duplicate_keys = false;
  ASSERT_TRUE(ParseJson(R"({"a": {"k": 1, "k": 2}})", "t", lenient, &j).ok());
  EXPECT_EQ(j["a"]["k"], 2);
}

TEST(ParseJson, SyntaxErrorsNameTheByteAndCommentsAreOptIn) {
  Json j;
  Status s = ParseJsonStrict("{\"a\": ,}", "cfg", &j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("cfg: not valid JSON (byte 7"));
  EXPECT_FALSE(ParseJsonStrict("{\"a\": 1 // c\n}", "t", &j).ok());
  JsonParseOptions comments;
  comments.allow_comments = true;
  ASSERT_TRUE(ParseJson("{\"a\": 1 // c\n}", "t", comments, &j).ok());
  EXPECT_EQ(j["a"], 1);
  // Numbers a double cannot hold are errors, not exceptions.
  EXPECT_FALSE(ParseJsonStrict("[1e400]", "t", &j).ok());
}

TEST(JsonExcerpt, ScalarsAsJsonContainersBySize) {
  EXPECT_EQ(JsonExcerpt(Json(42)), "42");
  EXPECT_EQ(JsonExcerpt(Json(-1.5)), "-1.5");
  EXPECT_EQ(JsonExcerpt(Json(true)), "true");
  EXPECT_EQ(JsonExcerpt(Json(nullptr)), "null");
  EXPECT_EQ(JsonExcerpt(Json("hi")), "\"hi\"");
  EXPECT_EQ(JsonExcerpt(Json::array({1, 2, 3})), "an array of 3 elements");
  EXPECT_EQ(JsonExcerpt(Json::array({1})), "an array of 1 element");
  EXPECT_EQ(JsonExcerpt(Json::object({{"a", 1}, {"b", 2}})), "an object with 2 keys");
  EXPECT_EQ(JsonExcerpt(Json(uint64_t{18446744073709551615u})), "18446744073709551615");
}

TEST(JsonExcerpt, LongAndInvalidStringsAreCutAndEscaped) {
  const std::string excerpt = JsonExcerpt(Json(std::string(1000000, 'x')), 10);
  EXPECT_EQ(excerpt, "\"xxxxxxxxxx\"... (1000000 bytes)");
  // Invalid UTF-8 would make dump() throw; the excerpt escapes it.
  EXPECT_EQ(JsonExcerpt(Json(std::string("a\xff\n"))), "\"a\\xff\\x0a\"");
}

// Finding 12: a --json output holding a path that is not UTF-8 (tier ls on
// such a directory) made dump() throw, and the command end as a bug.
TEST(JsonOutput, InvalidUtf8InStringsAndKeysIsEscapedNotThrown) {
  const Json j = {{"path", "run\xff/checkpoints"},
                  {"k\xfe", Json::array({"ok", "x\xc3", 3})},
                  {"nested", {{"name", "größe"}}}};
  EXPECT_THROW((void)j.dump(), Json::type_error);
  const Json back = Json::parse(JsonOutput(j));
  EXPECT_EQ(back["path"], "run\\xff/checkpoints");
  EXPECT_EQ(back["k\\xfe"], (Json::array({"ok", "x\\xc3", 3})));
  EXPECT_EQ(back["nested"]["name"], "größe");
  const Json small = {{"a", 1}};
  EXPECT_EQ(JsonOutput(small, 2), small.dump(2));
}

TEST(JsonExcerpt, ADeepValueIsDescribedWithoutRecursion) {
  // Built directly (no parser limit): 100000 levels. JsonExcerpt looks at
  // the top only; dump() here would recurse 100000 frames.
  Json deep = Json::array();
  for (int i = 0; i < 100000; ++i) {
    Json outer = Json::array();
    outer.push_back(std::move(deep));  // moved, not copied: copying recurses
    deep = std::move(outer);
  }
  EXPECT_EQ(JsonExcerpt(deep), "an array of 1 element");
}

}  // namespace
}  // namespace tierflow

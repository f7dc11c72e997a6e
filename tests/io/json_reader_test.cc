// JsonReader, the typed reader every config parser uses: type and range
// checks before any get<T>() (which would throw or wrap), and errors of the
// form "LABEL: PATH: ..." that show the value as written.
#include "io/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tierflow {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(JsonReader, IntAcceptsIntegralFloatsAndRefusesFractions) {
  const JsonReader r("ds.json");
  int64_t i = 0;
  ASSERT_TRUE(r.Int(Json::parse("1e9"), "steps", 0, INT64_MAX, &i).ok());
  EXPECT_EQ(i, 1000000000);
  Status s = r.Int(Json::parse("2.5"), "steps", 0, 100, &i);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "ds.json: steps: expected an integer, got 2.5");
  s = r.Int(Json("7"), "steps", 0, 100, &i);
  EXPECT_EQ(s.message(), "ds.json: steps: expected an integer, got \"7\"");
  EXPECT_EQ(i, 1000000000);  // unchanged on error
}

TEST(JsonReader, IntRangeErrorsShowTheValueAsWritten) {
  const JsonReader r("ds.json");
  int64_t i = 0;
  EXPECT_EQ(r.Int(Json(4), "zero_optimization.stage", 0, 3, &i).message(),
            "ds.json: zero_optimization.stage: value 4 is out of range [0, 3]");
  EXPECT_EQ(r.Int(Json(-1), "n", 0, 3, &i).message(),
            "ds.json: n: value -1 is out of range [0, 3]");
  // Above INT64_MAX: get<int64_t>() would wrap to -1; the message must not.
  Status big = r.Int(Json::parse("18446744073709551615"), "n", 0, 3, &i);
  EXPECT_THAT(big.message(), HasSubstr("18446744073709551615"));
  EXPECT_THAT(big.message(), ::testing::Not(HasSubstr("-1")));
}

TEST(JsonReader, NumbersBoolsStringsAndObjects) {
  const JsonReader r("p.json");
  double d = 0;
  ASSERT_TRUE(r.Number(Json(-2.5), "lr", &d).ok());
  EXPECT_EQ(d, -2.5);
  EXPECT_EQ(r.Number(Json("0.1"), "lr", &d).message(),
            "p.json: lr: expected a number, got \"0.1\"");
  ASSERT_TRUE(r.PositiveNumber(Json(3), "rate", &d).ok());
  EXPECT_EQ(d, 3);
  EXPECT_FALSE(r.PositiveNumber(Json(0), "rate", &d).ok());
  EXPECT_FALSE(r.PositiveNumber(Json(-1), "rate", &d).ok());
  bool b = false;
  EXPECT_EQ(r.Bool(Json(1), "fp16.enabled", &b).message(),
            "p.json: fp16.enabled: expected true or false, got 1");
  std::string str;
  EXPECT_FALSE(r.String(Json(1), "type", &str).ok());
  ASSERT_TRUE(r.String(Json("adam"), "type", &str).ok());
  EXPECT_EQ(str, "adam");
  EXPECT_THAT(r.Object(Json::array(), "zero_optimization").message(),
              HasSubstr("zero_optimization: expected an object ({...}), got an array"));
}

TEST(JsonReader, StringListTakesOneStringOrAnArrayAndNamesTheBadElement) {
  const JsonReader r("ds.json");
  std::vector<std::string> list;
  ASSERT_TRUE(r.StringList(Json("/nvme"), "nvme_path", &list).ok());
  EXPECT_EQ(list, std::vector<std::string>{"/nvme"});
  ASSERT_TRUE(r.StringList(Json::parse(R"(["/a", "/b"])"), "nvme_path", &list).ok());
  EXPECT_EQ(list, (std::vector<std::string>{"/a", "/b"}));
  Status s = r.StringList(Json::parse(R"(["/a", 2])"), "nvme_path", &list);
  EXPECT_EQ(s.message(), "ds.json: nvme_path[1]: expected a string, got 2");
  EXPECT_EQ(list, (std::vector<std::string>{"/a", "/b"}));  // unchanged on error
  EXPECT_FALSE(r.StringList(Json(3), "nvme_path", &list).ok());
}

TEST(JsonReader, FindTreatsNullAsNotGiven) {
  const Json obj = Json::parse(R"({"a": 1, "b": null})");
  ASSERT_NE(JsonReader::Find(obj, "a"), nullptr);
  EXPECT_EQ(*JsonReader::Find(obj, "a"), 1);
  EXPECT_EQ(JsonReader::Find(obj, "b"), nullptr);
  EXPECT_EQ(JsonReader::Find(obj, "c"), nullptr);
  EXPECT_EQ(JsonReader::Find(Json::array(), "a"), nullptr);
}

}  // namespace
}  // namespace tierflow

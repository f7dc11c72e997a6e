// PathComponent: the one validated type for outside names that become a path
// component (unit names, run ids, tensor names, "files" entries).
#include "common/path_component.h"

#include <string>

#include <gtest/gtest.h>

namespace tierflow {
namespace {

TEST(PathComponent, AcceptsPlainNames) {
  for (const char* name : {"layer.0", "embeddings", "head", "run-20260101-000000-42-1", "a..b",
                           "x.safetensors", "名前"}) {
    auto c = PathComponent::Parse(name, "unit name");
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    EXPECT_EQ(c->str(), name);
    const std::string& as_string = *c;  // a checked string is a string
    EXPECT_EQ(as_string, name);
  }
  EXPECT_TRUE(PathComponent::Parse(std::string(255, 'a'), "name").ok());
}

TEST(PathComponent, RejectsNamesThatLeaveTheDirectory) {
  const std::string cases[] = {"",
                               ".",
                               "..",
                               "../x",
                               "a/b",
                               "/etc",
                               "a\\b",
                               ".hidden",
                               ".tmp-1",
                               "a\nb",
                               "a\x7f",
                               "tab\tx",
                               std::string("nul\0x", 5),
                               std::string(256, 'a')};
  for (const std::string& name : cases) {
    auto c = PathComponent::Parse(name, "units[3].name");
    ASSERT_FALSE(c.ok()) << QuotedExcerpt(name);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    // The error names the field and says why.
    EXPECT_EQ(c.status().message().rfind("units[3].name ", 0), 0u) << c.status().message();
    EXPECT_NE(c.status().message().find("cannot be used as a file name"), std::string::npos);
  }
}

TEST(PathComponent, ErrorShowsTheNameEscapedAndCut) {
  auto c = PathComponent::Parse("../" + std::string(1000, 'x') + "\x01", "run id");
  ASSERT_FALSE(c.ok());
  EXPECT_LT(c.status().message().size(), 250u) << c.status().message();
  EXPECT_NE(c.status().message().find("(1004 bytes)"), std::string::npos) << c.status().message();
}

TEST(QuotedExcerpt, EscapesControlAndNonAsciiBytesAndQuotes) {
  EXPECT_EQ(QuotedExcerpt("ab"), "\"ab\"");
  EXPECT_EQ(QuotedExcerpt("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuotedExcerpt(std::string("a\0\n\xff", 4)), "\"a\\x00\\x0a\\xff\"");
  EXPECT_EQ(QuotedExcerpt("abcdef", 3), "\"abc\"... (6 bytes)");
}

}  // namespace
}  // namespace tierflow

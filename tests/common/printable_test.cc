// Outside text made printable: invalid UTF-8 and control characters become
// \xNN, valid UTF-8 stays; every Status message goes through it.
#include "common/printable.h"

#include <string>

#include <gtest/gtest.h>

#include "tierflow/status.h"

namespace tierflow {
namespace {

TEST(Printable, InvalidUtf8IsEscapedAndValidUtf8Kept) {
  EXPECT_EQ(EscapeInvalidUtf8("plain"), "plain");
  EXPECT_EQ(EscapeInvalidUtf8("名前 größe ✓ 😀"), "名前 größe ✓ 😀");
  EXPECT_EQ(EscapeInvalidUtf8("a\xff"
                              "b"),
            "a\\xffb");
  EXPECT_EQ(EscapeInvalidUtf8("\xc3"), "\\xc3");                             // cut short
  EXPECT_EQ(EscapeInvalidUtf8("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(EscapeInvalidUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(EscapeInvalidUtf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  EXPECT_EQ(EscapeInvalidUtf8("\xe2\x9c"), "\\xe2\\x9c");
  // Controls are JSON's to escape: EscapeInvalidUtf8 keeps them.
  EXPECT_EQ(EscapeInvalidUtf8("a\x1b[31m"), "a\x1b[31m");
}

TEST(Printable, ControlCharactersOtherThanNewlineAndTabAreEscaped) {
  EXPECT_EQ(PrintableText("two\nlines\tand a tab"), "two\nlines\tand a tab");
  EXPECT_EQ(PrintableText("red\x1b[31m"), "red\\x1b[31m");
  EXPECT_EQ(PrintableText(std::string("nul\0here", 8)), "nul\\x00here");
  EXPECT_EQ(PrintableText("del\x7f"), "del\\x7f");
  EXPECT_EQ(PrintableText("c1\xc2\x9b"), "c1\\xc2\\x9b");  // U+009B, the C1 CSI
  EXPECT_EQ(PrintableText("\xff\xfe"), "\\xff\\xfe");
  const std::string once = PrintableText("x\xff\x01y");
  EXPECT_EQ(PrintableText(once), once);  // idempotent
}

// Finding 12: raw invalid UTF-8 was echoed into errors (a JSON parser's
// "last read: '...'", a path, an argument). Every Status message is made
// printable where it is built.
TEST(Printable, RawInvalidUtf8IsNotEchoedIntoErrors) {
  const Status s = InvalidArgumentError("config k.json: last read: '\"st\xff'");
  EXPECT_EQ(s.message(), "config k.json: last read: '\"st\\xff'");
  EXPECT_EQ(s.WithContext("dir\xfe").message(), "dir\\xfe: config k.json: last read: '\"st\\xff'");
  EXPECT_EQ(InvalidArgumentError("line one\nline two").message(), "line one\nline two");
}

}  // namespace
}  // namespace tierflow

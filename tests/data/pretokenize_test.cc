// GPT-2's split regex, reproduced by hand: each case is what
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// gives, worked out from the regex (backtracking included).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/gpt2_pretokenize.h"
#include "data/unicode_class.h"

namespace tierflow {
namespace {

std::vector<std::string> Split(std::string_view text) {
  auto pieces = SplitGpt2Pieces(text);
  EXPECT_TRUE(pieces.ok()) << pieces.status().ToString();
  std::vector<std::string> out;
  if (pieces.ok()) {
    for (auto p : *pieces) out.emplace_back(p);
  }
  return out;
}

using V = std::vector<std::string>;

TEST(Gpt2Pretokenize, WordsTakeTheirLeadingSpace) {
  EXPECT_EQ(Split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split(" the"), (V{" the"}));
  EXPECT_EQ(Split(""), V{});
}

TEST(Gpt2Pretokenize, Contractions) {
  EXPECT_EQ(Split("I'm don't you'll they've we're she'd it's"),
            (V{"I", "'m", " don", "'t", " you", "'ll", " they", "'ve", " we", "'re", " she", "'d",
               " it", "'s"}));
  // Case-sensitive, and only at the start of a match: inside a punctuation
  // run the apostrophe belongs to the run.
  EXPECT_EQ(Split("'S"), (V{"'", "S"}));
  EXPECT_EQ(Split("?!'s"), (V{"?!'", "s"}));
  EXPECT_EQ(Split("'"), (V{"'"}));
  EXPECT_EQ(Split("'l"), (V{"'", "l"}));
}

TEST(Gpt2Pretokenize, WhitespaceRunsLeaveTheLastSpaceToTheNextWord) {
  EXPECT_EQ(Split("   Hello"), (V{"  ", " Hello"}));
  EXPECT_EQ(Split("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(Split("hi   "), (V{"hi", "   "}));  // at the end the run stays whole
  // Only U+0020 leads a word: a newline before a word is its own piece.
  EXPECT_EQ(Split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("a\nb"), (V{"a", "\n", "b"}));
  EXPECT_EQ(Split("x:\tTab"), (V{"x", ":", "\t", "Tab"}));
  EXPECT_EQ(Split("\n\n"), (V{"\n\n"}));
  EXPECT_EQ(Split(" \n x"), (V{" \n", " x"}));
}

TEST(Gpt2Pretokenize, NumbersAndPunctuation) {
  EXPECT_EQ(Split("x 123 4.5"), (V{"x", " 123", " 4", ".", "5"}));
  EXPECT_EQ(Split("abc123def"), (V{"abc", "123", "def"}));
  EXPECT_EQ(Split("f(x):"), (V{"f", "(", "x", "):"}));
  EXPECT_EQ(Split(" ... !"), (V{" ...", " !"}));
}

TEST(Gpt2Pretokenize, UnicodeClasses) {
  EXPECT_EQ(Split("héllo wörld"), (V{"héllo", " wörld"}));
  EXPECT_EQ(Split("日本語のテキスト"), (V{"日本語のテキスト"}));  // Lo letters
  EXPECT_EQ(Split("€5 ½"), (V{"€", "5", " ½"}));                  // Sc other; No number
  EXPECT_EQ(Split("x\u00A0y"), (V{"x", "\u00A0", "y"}));          // NBSP is whitespace
  EXPECT_EQ(Split("٣٤ kg"), (V{"٣٤", " kg"}));                    // Arabic-Indic digits: Nd
  EXPECT_EQ(Split("emoji 😀👍 end"), (V{"emoji", " 😀👍", " end"}));  // So: other
}

TEST(Gpt2Pretokenize, PiecesConcatenateBackToTheText) {
  const std::string text =
      "The quick brown fox — “quoted” — jumps over 13 lazy dogs!\n\n\tIndented  text, "
      "naïve café, 東京 2024年, it's done.   \n";
  std::string joined;
  for (const auto& p : Split(text)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, text);
}

TEST(Gpt2Pretokenize, InvalidUtf8NamesTheByteOffset) {
  for (const std::string& bad : {std::string("ab\xFF"
                                             "cd"),
                                 std::string("ab\xC3"),             // truncated
                                 std::string("ab\xC0\xAF"),         // overlong '/'
                                 std::string("ab\xED\xA0\x80")}) {  // surrogate
    auto pieces = SplitGpt2Pieces(bad);
    ASSERT_FALSE(pieces.ok());
    EXPECT_EQ(pieces.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(pieces.status().message().find("byte offset 2"), std::string::npos)
        << pieces.status().message();
  }
  auto shifted = SplitGpt2Pieces("ab\xFF", 100);
  ASSERT_FALSE(shifted.ok());
  EXPECT_NE(shifted.status().message().find("byte offset 102"), std::string::npos);
}

TEST(UnicodeClass, TablesAgreeWithKnownCategories) {
  using data_internal::CharClass;
  using data_internal::ClassifyCodePoint;
  EXPECT_EQ(ClassifyCodePoint(U'a'), CharClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(U'Z'), CharClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(U'7'), CharClass::kNumber);
  EXPECT_EQ(ClassifyCodePoint(U'_'), CharClass::kOther);
  EXPECT_EQ(ClassifyCodePoint(0xAA), CharClass::kLetter);     // ª Lo
  EXPECT_EQ(ClassifyCodePoint(0xB2), CharClass::kNumber);     // ² No
  EXPECT_EQ(ClassifyCodePoint(0xD7), CharClass::kOther);      // × Sm, between letter ranges
  EXPECT_EQ(ClassifyCodePoint(0x3042), CharClass::kLetter);   // あ
  EXPECT_EQ(ClassifyCodePoint(0x2167), CharClass::kNumber);   // Ⅷ Nl
  EXPECT_EQ(ClassifyCodePoint(0x3000), CharClass::kSpace);    // ideographic space
  EXPECT_EQ(ClassifyCodePoint(0x85), CharClass::kSpace);      // NEL
  EXPECT_EQ(ClassifyCodePoint(0x200B), CharClass::kOther);    // zero-width space is not White_Space
  EXPECT_EQ(ClassifyCodePoint(0x1F600), CharClass::kOther);   // 😀
  EXPECT_EQ(ClassifyCodePoint(0x20000), CharClass::kLetter);  // CJK extension B
  EXPECT_EQ(ClassifyCodePoint(0x10FFFF), CharClass::kOther);
}

}  // namespace
}  // namespace tierflow

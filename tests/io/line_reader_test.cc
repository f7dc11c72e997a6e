// LineReader: lines as split, over a file and over text alike (blank lines,
// '\r', a last line without '\n', lines across read buffers), and the
// per-line bound: a longer line refused by number with its whole length,
// while memory stays at the bound.
#include "io/line_reader.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/io/io_test_util.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;
using testing_io::ScratchDir;
using testing_io::WriteBytes;

// Every line, or the first error as "ERROR: message".
std::vector<std::string> AllLines(LineReader& reader) {
  std::vector<std::string> out;
  std::string_view line;
  while (true) {
    auto more = reader.Next(&line);
    if (!more.ok()) {
      out.push_back("ERROR: " + more.status().message());
      return out;
    }
    if (!*more) return out;
    out.emplace_back(line);
    EXPECT_EQ(reader.line_number(), static_cast<int64_t>(out.size()));
  }
}

std::vector<std::string> FileLines(const std::string& bytes, size_t max_line_bytes,
                                   const std::string& advice = "") {
  ScratchDir dir;
  WriteBytes(dir.File("lines.jsonl"), bytes);
  auto reader = LineReader::Open(dir.File("lines.jsonl"), {max_line_bytes, advice});
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return {};
  std::vector<std::string> lines = AllLines(*reader);
  for (std::string& l : lines) {
    if (const size_t at = l.find(dir.File("lines.jsonl")); at != std::string::npos) {
      l.replace(at, dir.File("lines.jsonl").size(), "lines.jsonl");
    }
  }
  return lines;
}

std::vector<std::string> TextLines(const std::string& text, size_t max_line_bytes,
                                   const std::string& advice = "") {
  auto reader = LineReader::OverText(text, "lines.jsonl", {max_line_bytes, advice});
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  return reader.ok() ? AllLines(*reader) : std::vector<std::string>{};
}

TEST(LineReader, SplitsAtNewlinesKeepingBlankLinesAndTheLastUnendedOne) {
  const std::string text = "a\n\nb\r\n  \nlast";
  const std::vector<std::string> want = {"a", "", "b\r", "  ", "last"};
  EXPECT_EQ(FileLines(text, 100), want);
  EXPECT_EQ(TextLines(text, 100), want);
  // A trailing '\n' does not start another line; nothing at all is no line.
  EXPECT_EQ(FileLines("a\nb\n", 100), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(TextLines("a\nb\n", 100), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(FileLines("", 100).empty());
  EXPECT_EQ(FileLines("\n", 100), (std::vector<std::string>{""}));
}

TEST(LineReader, LinesLongerThanOneReadComeBackWhole) {
  // Lines of up to 3 MiB across the 1 MiB reads, with short ones between.
  std::vector<std::string> want;
  std::string bytes;
  for (size_t n : {size_t{10}, size_t{3} << 20, size_t{1}, (size_t{1} << 20) - 1, size_t{1} << 20,
                   size_t{2} << 20}) {
    std::string line(n, 'x');
    for (size_t i = 0; i < n; i += 4093) line[i] = static_cast<char>('a' + want.size());
    want.push_back(line);
    bytes += line + "\n";
  }
  EXPECT_EQ(FileLines(bytes, size_t{3} << 20), want);
  EXPECT_EQ(TextLines(bytes, size_t{3} << 20), want);
}

TEST(LineReader, ALineOverTheBoundIsRefusedByNumberWithItsWholeLength) {
  const std::string long_line(5000000, 'y');  // past several reads
  for (const std::string& tail : {std::string("\nok\n"), std::string()}) {
    const std::string bytes = "ok\n\n" + long_line + tail;
    const std::string want =
        "ERROR: lines.jsonl:3 is 5000000 bytes long, more than the 4096 accepted per line; "
        "split it";
    EXPECT_EQ(FileLines(bytes, 4096, "split it"), (std::vector<std::string>{"ok", "", want}));
    EXPECT_EQ(TextLines(bytes, 4096, "split it"), (std::vector<std::string>{"ok", "", want}));
  }
  // Exactly the bound is accepted.
  EXPECT_EQ(FileLines(std::string(4096, 'z') + "\n", 4096),
            (std::vector<std::string>{std::string(4096, 'z')}));
  EXPECT_EQ(FileLines(std::string(4097, 'z'), 4096).back(),
            "ERROR: lines.jsonl:1 is 4097 bytes long, more than the 4096 accepted per line");
}

// An endless line is refused after a bounded count, not read for ever.
TEST(LineReader, AnEndlessLineIsRefusedWithItsLengthSoFar) {
  auto reader = LineReader::Open("/dev/zero", {4096, ""});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::string_view line;
  auto more = reader->Next(&line);
  ASSERT_FALSE(more.ok());
  EXPECT_THAT(more.status().message(),
              HasSubstr("/dev/zero:1 is at least 268435456 bytes long, more than the 4096"));
}

TEST(LineReader, ErrorsNameThePath) {
  ScratchDir dir;
  auto missing = LineReader::Open(dir.File("missing.jsonl"), {100, ""});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.jsonl"));
  auto directory = LineReader::Open(dir.path(), {100, ""});
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("is a directory"));
  WriteBytes(dir.File("x"), "x\n");
  auto unbounded = LineReader::Open(dir.File("x"), {0, ""});
  ASSERT_FALSE(unbounded.ok());
  EXPECT_THAT(unbounded.status().message(), HasSubstr("must be positive"));
}

}  // namespace
}  // namespace tierflow

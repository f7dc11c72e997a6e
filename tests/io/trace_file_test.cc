// WriteTraceFile: the recorder's spans as a Chrome trace, replacing the file
// crash-safely; a path that cannot be written is an error naming it, and an
// existing trace is left as it was.
#include "io/trace_file.h"

#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

TEST(TraceFile, WritesEverySpanAndKeepsTheOldFileWhenTheWriteFails) {
  testing_common::ScratchDir dir("tierflow-trace-");
  TraceRecorder trace;
  trace.SetEnabled(true);
  const auto t0 = TraceRecorder::Clock::now();
  trace.AddSpan("optimizer", "adam layer.0", t0, t0 + std::chrono::milliseconds(2));
  trace.AddSpan("h2d", "weights layer.0", t0, t0 + std::chrono::milliseconds(1));
  const std::string path = dir.path() + "/trace.json";
  ASSERT_TRUE(WriteTraceFile(trace, path).ok());
  const std::string first = testing_common::ReadWholeFile(path);
  auto doc = nlohmann::json::parse(first);
  int spans = 0;
  for (const auto& e : doc["traceEvents"]) spans += e["ph"] == "X";
  EXPECT_EQ(spans, 2);

  // A directory where the file should be: the write fails, naming the path.
  const std::string blocked = dir.path() + "/blocked";
  ASSERT_TRUE(std::filesystem::create_directory(blocked));
  Status s = WriteTraceFile(trace, blocked);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find(blocked), std::string::npos) << s.ToString();
  // The earlier trace is untouched, and no temporary file is left beside it.
  EXPECT_EQ(testing_common::ReadWholeFile(path), first);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.exists();
  EXPECT_EQ(entries, 2);  // trace.json and blocked/
}

}  // namespace
}  // namespace tierflow

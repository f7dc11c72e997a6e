// DeviceSpans: trace spans of stream work timed by events. A span reaches
// the trace only once its events have completed, at the anchor's host time
// plus the device's elapsed time, and its events are reused afterwards.
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "common/trace.h"
#include "engine/device_spans.h"
#include "tests/engine/engine_test_util.h"

namespace tierflow {
namespace {

using Clock = TraceRecorder::Clock;

TEST(DeviceSpans, ASpanIsTracedOnceItHasRunAndIsTimedByItsEvents) {
  auto device = testing_util::CpuDevice();
  auto stream = device->CreateStream("s").value();
  TraceRecorder trace;
  DeviceSpans spans(*device, &trace);
  EXPECT_EQ(spans.Begin(*stream).status().code(), StatusCode::kFailedPrecondition);  // no anchor

  const Clock::time_point before = Clock::now();
  ASSERT_TRUE(spans.Anchor(*stream).ok());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto started = spans.Begin(*stream);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  // The work: blocked until released, then at least 20 ms long.
  ASSERT_TRUE(stream
                  ->HostCallback([released] {
                    released.wait();
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_TRUE(spans.End(*stream, std::move(started).value(), "copy", "one").ok());
  ASSERT_TRUE(spans.Collect().ok());
  EXPECT_EQ(trace.BusySeconds().count("copy"), 0u);  // not run yet: still pending

  release.set_value();
  ASSERT_TRUE(stream->Synchronize().ok());
  ASSERT_TRUE(spans.Collect().ok());
  const Clock::time_point after = Clock::now();
  const auto busy = trace.BusySeconds();
  ASSERT_EQ(busy.count("copy"), 1u);
  EXPECT_GE(busy.at("copy"), 0.020);
  EXPECT_LE(busy.at("copy"), std::chrono::duration<double>(after - before).count());

  // Many more spans, one at a time (each collected span's events go back to
  // the pool for the next), all traced while the trace keeps spans.
  trace.SetEnabled(true);
  for (int i = 0; i < 50; ++i) {
    auto s = spans.Begin(*stream);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(spans.End(*stream, std::move(s).value(), "copy", "again").ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    ASSERT_TRUE(spans.Collect().ok());
  }
  EXPECT_EQ(trace.num_spans(), 50u);
}

}  // namespace
}  // namespace tierflow

// Chrome trace events (the JSON that Perfetto and chrome://tracing open) and
// per-stage busy time, recorded from any thread.
//
// A span is a named interval on a track ("compute", "d2h", "optimizer",
// "nvme-read", ...). The recorder keeps spans only while enabled (so tracing
// chosen steps costs nothing otherwise) but always sums busy time per stage,
// which the engine's per-step statistics need. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  TraceRecorder();

  // While enabled, spans are kept for ChromeTraceJson. Default: disabled.
  void SetEnabled(bool enabled);
  bool enabled() const;

  // Adds a finished span. `args` is an optional JSON object text ("" for none).
  void AddSpan(const std::string& track, const std::string& name, Clock::time_point start,
               Clock::time_point end, const std::string& args = "");

  // Busy seconds per track since the last ResetBusy, merged so that
  // overlapping spans of one track are not counted twice.
  std::map<std::string, double> BusySeconds() const;
  void ResetBusy();

  // Every kept span as {"traceEvents": [...]}: what a trace file holds
  // (io/trace_file.h writes it the way every tierflow file is replaced).
  std::string ChromeTraceJson() const;
  size_t num_spans() const;

 private:
  struct Span {
    std::string track, name, args;
    int64_t start_us, end_us;
  };
  int64_t ToUs(Clock::time_point t) const;

  const Clock::time_point origin_;
  mutable std::mutex mu_;
  bool enabled_ = false;
  std::vector<Span> spans_;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> busy_;  // track -> intervals
};

// Records a span from construction to destruction.
class ScopedSpan {
 public:
  ScopedSpan(TraceRecorder* recorder, std::string track, std::string name)
      : recorder_(recorder),
        track_(std::move(track)),
        name_(std::move(name)),
        start_(TraceRecorder::Clock::now()) {}
  ~ScopedSpan() {
    if (recorder_ != nullptr)
      recorder_->AddSpan(track_, name_, start_, TraceRecorder::Clock::now());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  TraceRecorder* recorder_;
  std::string track_, name_;
  TraceRecorder::Clock::time_point start_;
};

}  // namespace tierflow

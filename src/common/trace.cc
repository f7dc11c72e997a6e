// Chrome trace recording and per-track busy time.
#include "common/trace.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tierflow {

TraceRecorder::TraceRecorder() : origin_(Clock::now()) {}

void TraceRecorder::SetEnabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = enabled;
}

bool TraceRecorder::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

int64_t TraceRecorder::ToUs(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void TraceRecorder::AddSpan(const std::string& track, const std::string& name,
                            Clock::time_point start, Clock::time_point end,
                            const std::string& args) {
  int64_t s = ToUs(start), e = std::max(ToUs(end), s);
  std::lock_guard<std::mutex> lock(mu_);
  busy_[track].emplace_back(s, e);
  if (enabled_) spans_.push_back(Span{track, name, args, s, e});
}

std::map<std::string, double> TraceRecorder::BusySeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, double> out;
  for (const auto& [track, intervals] : busy_) {
    auto sorted = intervals;
    std::sort(sorted.begin(), sorted.end());
    int64_t total = 0, cur_s = -1, cur_e = -1;
    for (const auto& [s, e] : sorted) {
      if (s > cur_e) {
        total += cur_e - cur_s;
        cur_s = s;
        cur_e = e;
      } else {
        cur_e = std::max(cur_e, e);
      }
    }
    total += cur_e - cur_s;
    out[track] = static_cast<double>(total) * 1e-6;
  }
  return out;
}

void TraceRecorder::ResetBusy() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_.clear();
}

size_t TraceRecorder::num_spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

std::string TraceRecorder::ChromeTraceJson() const {
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, int> tids;
    for (const Span& s : spans_) {
      auto [it, inserted] = tids.emplace(s.track, static_cast<int>(tids.size()) + 1);
      if (inserted) {
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", 1},
                          {"tid", it->second},
                          {"args", {{"name", s.track}}}});
      }
      nlohmann::json e = {{"name", s.name},
                          {"cat", s.track},
                          {"ph", "X"},
                          {"pid", 1},
                          {"tid", it->second},
                          {"ts", s.start_us},
                          {"dur", s.end_us - s.start_us}};
      if (!s.args.empty()) e["args"] = nlohmann::json::parse(s.args, nullptr, false);
      events.push_back(std::move(e));
    }
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

}  // namespace tierflow

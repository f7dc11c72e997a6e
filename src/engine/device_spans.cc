// Event-timed trace spans of device streams.
#include "engine/device_spans.h"

#include <chrono>
#include <cstddef>
#include <utility>

namespace tierflow {

DeviceSpans::DeviceSpans(Device& device, TraceRecorder* trace) : device_(device), trace_(trace) {}

Status DeviceSpans::Anchor(Stream& idle) {
  std::shared_ptr<AnchorPoint> anchor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // An anchor that neither a span nor current_ refers to is free; it
    // leaves the list while it is re-recorded, so no other Anchor takes it.
    for (size_t i = 0; i < anchors_.size(); ++i) {
      if (anchors_[i].use_count() == 1) {
        anchor = std::move(anchors_[i]);
        anchors_.erase(anchors_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  if (!anchor) {
    anchor = std::make_shared<AnchorPoint>();
    TF_ASSIGN_OR_RETURN(anchor->event, device_.CreateEvent(/*enable_timing=*/true));
  }
  Status s = idle.Record(*anchor->event);
  if (s.ok()) s = anchor->event->HostWait();
  const TraceRecorder::Clock::time_point now = TraceRecorder::Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  anchors_.push_back(anchor);  // kept even on failure: a stream may still reach its event
  if (!s.ok()) return s;
  anchor->time = now;
  current_ = anchor;
  return Status::Ok();
}

StatusOr<Event*> DeviceSpans::TakeEvent() {
  if (free_.empty()) {
    TF_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, device_.CreateEvent(/*enable_timing=*/true));
    free_.push_back(e.get());
    events_.push_back(std::move(e));
  }
  Event* e = free_.back();
  free_.pop_back();
  return e;
}

StatusOr<DeviceSpans::Started> DeviceSpans::Begin(Stream& stream) {
  Started started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ == nullptr) {
      return FailedPreconditionError("DeviceSpans::Begin before the first Anchor");
    }
    TF_ASSIGN_OR_RETURN(started.start, TakeEvent());
    started.anchor = current_;
  }
  TF_RETURN_IF_ERROR(stream.Record(*started.start));
  return started;
}

Status DeviceSpans::End(Stream& stream, Started started, std::string track, std::string name) {
  Event* end;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TF_ASSIGN_OR_RETURN(end, TakeEvent());
  }
  TF_RETURN_IF_ERROR(stream.Record(*end));
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(
      Pending{started.start, end, std::move(started.anchor), std::move(track), std::move(name)});
  return Status::Ok();
}

Status DeviceSpans::Collect() {
  std::lock_guard<std::mutex> lock(mu_);
  Status first_error;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (!p.start->Query() || !p.end->Query()) {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
      continue;
    }
    StatusOr<double> begin_ms = p.start->ElapsedMsSince(*p.anchor->event);
    StatusOr<double> end_ms = p.end->ElapsedMsSince(*p.anchor->event);
    if (begin_ms.ok() && end_ms.ok()) {
      if (trace_ != nullptr) {
        using Ms = std::chrono::duration<double, std::milli>;
        const auto at = [&](double ms) {
          return p.anchor->time +
                 std::chrono::duration_cast<TraceRecorder::Clock::duration>(Ms(ms));
        };
        trace_->AddSpan(p.track, p.name, at(*begin_ms), at(*end_ms));
      }
    } else if (first_error.ok()) {
      first_error = (begin_ms.ok() ? end_ms.status() : begin_ms.status())
                        .WithContext("timing trace span '" + p.name + "'");
    }
    free_.push_back(p.start);
    free_.push_back(p.end);
  }
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(kept), pending_.end());
  return first_error;
}

}  // namespace tierflow

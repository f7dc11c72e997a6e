// Trace spans of work on device streams, timed by the device's own events
// instead of host callbacks.
//
// A host callback per transfer costs a trip through the driver's callback
// thread and serializes the stream behind it; an event record is a marker the
// device passes by. So a span is two timing events recorded around the work
// (Begin, End), turned into a trace span later (Collect), once both have
// completed, at anchor time + ElapsedMsSince(anchor). The anchor is an event
// recorded on an idle stream and waited for (Anchor), so its host time is its
// completion time within the wake-up latency; every span is timed from the
// anchor current at its Begin, which completed before that span's events
// were recorded, so elapsed times are never negative.
//
// Events are pooled: a span's events go back to the pool when it is
// collected. A span begun but never ended keeps its event out of the pool
// (never freed while a stream may still reach it).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/trace.h"
#include "tierflow/device.h"

namespace tierflow {

// A time origin: an event and the host time at which it completed.
struct AnchorPoint {
  std::unique_ptr<Event> event;
  TraceRecorder::Clock::time_point time;
};

class DeviceSpans {
 public:
  // `trace` is not owned and must outlive this; null records nothing.
  DeviceSpans(Device& device, TraceRecorder* trace);
  DeviceSpans(const DeviceSpans&) = delete;
  DeviceSpans& operator=(const DeviceSpans&) = delete;

  // Takes a new time origin on `idle`, a stream with no pending work (its
  // record completes at once): records an event and waits for it.
  Status Anchor(Stream& idle);

  struct Started {
    Event* start = nullptr;
    std::shared_ptr<const AnchorPoint> anchor;
  };
  // Records the start of a span on `stream`.
  StatusOr<Started> Begin(Stream& stream);
  // Records its end on `stream`; the span is added to the trace by a later
  // Collect, on `track` with `name`.
  Status End(Stream& stream, Started started, std::string track, std::string name);

  // Adds every ended span whose events have completed to the trace; the
  // others stay pending. Returns the first error reading an event's time.
  Status Collect();

 private:
  struct Pending {
    Event* start;
    Event* end;
    std::shared_ptr<const AnchorPoint> anchor;
    std::string track, name;
  };
  StatusOr<Event*> TakeEvent();  // REQUIRES: mu_ held

  Device& device_;
  TraceRecorder* trace_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Event>> events_;  // every event made, owned until destruction
  std::vector<Event*> free_;
  std::vector<std::shared_ptr<AnchorPoint>> anchors_;  // reused when no span holds one
  std::shared_ptr<const AnchorPoint> current_;
  std::vector<Pending> pending_;
};

}  // namespace tierflow

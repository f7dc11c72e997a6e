// PathComponent: a name from outside (a unit name in trainer_state.json, a
// run id in swap_runs.json, a tensor name) that is safe to use as one
// component of a path under a directory tierflow owns.
//
// Anything read from a file that becomes part of a path goes through
// PathComponent::Parse first, so a crafted checkpoint cannot name "../../etc"
// or "/abs" and make a tier command read or write outside the checkpoint.
// A PathComponent is never empty, ".", "..", or longer than NAME_MAX (255
// bytes); it contains no '/', '\\', NUL or other control character and does
// not start with '.' (tierflow's own temporaries and lock files do).
#pragma once

#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

class PathComponent {
 public:
  static constexpr size_t kMaxBytes = 255;

  // Errors: InvalidArgument naming `what` and saying why (the name is shown
  // escaped and cut to 64 bytes, never whole).
  static StatusOr<PathComponent> Parse(std::string_view name, std::string_view what);

  const std::string& str() const { return name_; }
  operator const std::string&() const { return name_; }  // NOLINT: a checked string is a string

 private:
  explicit PathComponent(std::string name) : name_(std::move(name)) {}
  std::string name_;
};

// Checks an absolute path read from outside (a swap directory in
// trainer_state.json, a checkpoint named by a marker) before it is used:
// it starts with '/', has no "." or ".." component, no NUL byte, no
// component over 255 bytes and is under PATH_MAX (4096) bytes. Every other
// name the file system accepts is accepted, hidden directories (".cache")
// and control characters included. Errors: InvalidArgument naming `what`
// and the path (escaped).
Status CheckAbsolutePath(std::string_view path, std::string_view what);

// `text` as a quoted, printable excerpt for an error message: control and
// non-ASCII bytes as \xNN, cut after `max_bytes` input bytes with "...".
std::string QuotedExcerpt(std::string_view text, size_t max_bytes = 64);

}  // namespace tierflow

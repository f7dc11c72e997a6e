// DirLock: one process at a time in a directory tierflow writes (a run's
// --out). Two runs sharing an output directory corrupt each other: a save
// sweeps the other's temporaries, metrics.jsonl is truncated under a live
// writer, swap_runs.json loses entries. So `tierflow train` takes this lock
// before it touches anything in --out and holds it until it exits, and
// `tierflow tier clean` takes it (or finds it held and leaves the directory
// alone).
//
// The lock is an flock(2) on DIR/.tierflow.lock. flock dies with its
// process, so the file a killed run leaves behind is simply locked again by
// the next one; the file only holds who took the lock last (pid, host, start
// time), for the message that refuses a second process.
#pragma once

#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

class DirLock {
 public:
  static constexpr char kFileName[] = ".tierflow.lock";

  // Takes the lock on `dir` (which must exist) without waiting, creating
  // DIR/.tierflow.lock when needed, and records this process in it; `what`
  // says what holds it ("tierflow train"). Errors: FailedPrecondition when
  // another open holds it (another process, or another DirLock in this one),
  // naming `dir` and the holder's pid; DataLoss when the lock file is a
  // symbolic link (never followed); FailedPrecondition when it has other
  // hard links or is not a regular file (the holder's line is written in
  // place, and would land in the other file); errno errors naming the lock
  // file.
  static StatusOr<DirLock> Acquire(const std::string& dir, std::string_view what);

  // OK when nobody holds `dir`'s lock (or there is no lock file); the
  // FailedPrecondition of Acquire when someone does. Creates nothing; may
  // hold the lock for an instant while probing.
  static Status CheckNotHeld(const std::string& dir);

  DirLock() = default;
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();  // releases the lock; the file stays

  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }
  void Release();

 private:
  int fd_ = -1;
  std::string dir_;
};

}  // namespace tierflow

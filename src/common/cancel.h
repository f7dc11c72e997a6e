// Process-wide cancellation: what a SIGINT/SIGTERM asks of long-running work.
//
// A signal handler calls RequestCancel (async-signal-safe). Every long loop
// (planning, loading, saving, migration, training setup) calls CheckCancel
// between iterations and returns its Aborted status, so a signal stops any
// command within one iteration instead of only the training step loop.
//
// A graceful stop (`tierflow train` checkpoints and exits on the first signal)
// must not be cut short by the very signal that asked for it: work done inside
// a CancelShield ignores the first request and stops only on a second one.
// The shield is process-wide, not per thread, so the engine's and the I/O
// threads honour it too.
//
// Thread safety: every function may be called from any thread;
// RequestCancel also from a signal handler.
#pragma once

#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

// Records a cancellation request from `signal_number` (0: not a signal).
// Async-signal-safe: lock-free atomics only.
void RequestCancel(int signal_number) noexcept;

// True once any request has arrived (shielded or not).
bool CancelRequested() noexcept;

// The number of requests so far and the signal of the latest (0 if none or not a signal).
int CancelRequestCount() noexcept;
int CancelSignal() noexcept;

// OK unless work should stop now: a request has arrived and no CancelShield
// is live, or two requests have arrived. Then Aborted: "interrupted by
// SIGTERM while <doing>".
Status CheckCancel(std::string_view doing);

// Installs SIGINT and SIGTERM handlers that call RequestCancel (sigaction,
// SA_RESTART so blocking reads are not cut short mid-transfer). The third
// signal restores the default action and re-raises it, so repeated Ctrl-C
// always ends the process. Commands whose long loops do not call CheckCancel
// must not install them (the default action is the right stop for them).
void InstallCancelSignalHandlers();
// The same handler for one more signal (data-parallel ranks: SIGUSR1, what
// mpirun forwards to them).
void InstallCancelSignalHandler(int signal_number);

// While one lives, the first request does not make CheckCancel fail.
class CancelShield {
 public:
  CancelShield() noexcept;
  ~CancelShield();
  CancelShield(const CancelShield&) = delete;
  CancelShield& operator=(const CancelShield&) = delete;
};

// Forgets every request (tests only; no CancelShield may be live).
void ResetCancelForTesting() noexcept;

}  // namespace tierflow

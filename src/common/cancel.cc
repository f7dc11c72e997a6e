// The process-wide cancellation flag set by SIGINT/SIGTERM (see cancel.h).
#include "common/cancel.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <string>

namespace tierflow {
namespace {

std::atomic<int> g_requests{0};
std::atomic<int> g_signal{0};
std::atomic<int> g_shields{0};

static_assert(std::atomic<int>::is_always_lock_free, "RequestCancel must be async-signal-safe");

// The third signal kills the process the default way: a user can always get
// out with repeated Ctrl-C, even from a loop that never checks.
void OnCancelSignal(int sig) {
  RequestCancel(sig);
  if (g_requests.load(std::memory_order_acquire) >= 3) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

void RequestCancel(int signal_number) noexcept {
  g_signal.store(signal_number, std::memory_order_relaxed);
  g_requests.fetch_add(1, std::memory_order_release);
}

bool CancelRequested() noexcept { return g_requests.load(std::memory_order_acquire) > 0; }

int CancelRequestCount() noexcept { return g_requests.load(std::memory_order_acquire); }

int CancelSignal() noexcept { return g_signal.load(std::memory_order_relaxed); }

Status CheckCancel(std::string_view doing) {
  const int n = g_requests.load(std::memory_order_acquire);
  if (n == 0) return Status::Ok();
  if (n == 1 && g_shields.load(std::memory_order_acquire) > 0) return Status::Ok();
  const int sig = CancelSignal();
  std::string by = sig == SIGINT    ? "SIGINT"
                   : sig == SIGTERM ? "SIGTERM"
                   : sig > 0        ? "signal " + std::to_string(sig)
                                    : "a stop request";
  return AbortedError("interrupted by " + by + " while " + std::string(doing));
}

void InstallCancelSignalHandler(int signal_number) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnCancelSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(signal_number, &sa, nullptr);
}

void InstallCancelSignalHandlers() {
  InstallCancelSignalHandler(SIGINT);
  InstallCancelSignalHandler(SIGTERM);
}

CancelShield::CancelShield() noexcept { g_shields.fetch_add(1, std::memory_order_acq_rel); }
CancelShield::~CancelShield() { g_shields.fetch_sub(1, std::memory_order_acq_rel); }

void ResetCancelForTesting() noexcept {
  g_requests.store(0, std::memory_order_release);
  g_signal.store(0, std::memory_order_relaxed);
}

}  // namespace tierflow

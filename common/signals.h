// Turns asynchronous POSIX signals (SIGTERM from Kubernetes or the launcher,
// SIGINT from Ctrl-C) into state that ordinary threads can poll or wait on.
//
// The handler itself only does async-signal-safe work: it sets a flag and
// writes the signal number into a self-pipe. Everything else (logging, the
// preemption all-reduce, the emergency checkpoint) happens on normal threads
// that call Received() or Wait().
//
// At most one SignalWatcher may exist at a time (handlers are process-wide);
// it restores the previous handlers when destroyed. Thread-safety: Received,
// Wait and Clear may be called from any thread.
#ifndef TRAINYARD_COMMON_SIGNALS_H_
#define TRAINYARD_COMMON_SIGNALS_H_

#include <signal.h>

#include <initializer_list>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace trainyard {

// Makes a write to a socket whose peer has reset fail with EPIPE instead of
// killing the process: SIGPIPE's disposition becomes "ignored", for the
// whole process (once; later calls do nothing). Gloo's TCP transport writes
// with writev, which has no MSG_NOSIGNAL, so without this a worker whose
// peers closed their connections during a cut link dies silently of
// SIGPIPE on its next send. Called by GlooCollective::Create and by the
// `trainyard` binary's main.
void IgnoreBrokenPipes();

// A process that dies of a fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
// SIGTRAP) first writes the signal and its stack, symbolized against
// `argv0`, to stderr: a worker that dies says why in its log. SIGTERM keeps
// the disposition it had (SignalWatcher owns it). Called by main.
void InstallFailureSignalHandler(const char* argv0);

class SignalWatcher {
 public:
  // Installs handlers for `signals` (e.g. {SIGTERM, SIGINT}). Fails with
  // kFailedPrecondition if another watcher is alive, or kInternal if the
  // handlers cannot be installed.
  static absl::StatusOr<std::unique_ptr<SignalWatcher>> Create(std::initializer_list<int> signals);

  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;
  ~SignalWatcher();

  // Whether `signo` arrived since creation (or the last Clear).
  bool Received(int signo) const;
  // Whether any watched signal arrived.
  bool AnyReceived() const;
  // Blocks until a watched signal arrives or `timeout` passes; returns the
  // signal number, or nullopt on timeout. Returns immediately for a signal
  // that arrived before the call and has not been returned by Wait yet.
  absl::optional<int> Wait(absl::Duration timeout);
  void Clear();

 private:
  SignalWatcher() = default;

  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SIGNALS_H_

#include "common/signals.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace trainyard {
namespace {

constexpr int kMaxSignal = 65;

// Process-wide state touched by the handler: lock-free atomics and a pipe.
std::atomic<bool> g_active{false};
std::atomic<bool> g_received[kMaxSignal];
int g_pipe[2] = {-1, -1};

void Handler(int signo) {
  const int saved_errno = errno;
  if (signo > 0 && signo < kMaxSignal) g_received[signo].store(true);
  const unsigned char byte = static_cast<unsigned char>(signo);
  // A full pipe only loses the wake-up byte; the flag is already set.
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

}  // namespace

void IgnoreBrokenPipes() {
  static const bool done = [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = SIG_IGN;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGPIPE, &action, nullptr) == 0;
  }();
  (void)done;
}

void InstallFailureSignalHandler(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  struct sigaction term;
  sigaction(SIGTERM, nullptr, &term);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  sigaction(SIGTERM, &term, nullptr);
}

absl::StatusOr<std::unique_ptr<SignalWatcher>> SignalWatcher::Create(std::initializer_list<int> signals) {
  bool expected = false;
  if (!g_active.compare_exchange_strong(expected, true)) {
    return absl::FailedPreconditionError("a SignalWatcher already exists in this process");
  }
  for (int signo : signals) {
    if (signo <= 0 || signo >= kMaxSignal) {
      g_active = false;
      return absl::InvalidArgumentError(absl::StrCat("signal number ", signo, " out of range"));
    }
  }
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_active = false;
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  for (auto& flag : g_received) flag.store(false);
  std::unique_ptr<SignalWatcher> watcher(new SignalWatcher);
  for (int signo : signals) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = Handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    struct sigaction previous;
    if (sigaction(signo, &action, &previous) != 0) {
      return absl::InternalError(absl::StrCat("sigaction(", signo, "): ", std::strerror(errno)));
    }
    watcher->signals_.push_back(signo);
    watcher->previous_.push_back(previous);
  }
  return watcher;
}

SignalWatcher::~SignalWatcher() {
  for (size_t i = 0; i < signals_.size(); ++i) {
    sigaction(signals_[i], &previous_[i], nullptr);
  }
  close(g_pipe[0]);
  close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
  g_active = false;
}

bool SignalWatcher::Received(int signo) const { return signo > 0 && signo < kMaxSignal && g_received[signo].load(); }

bool SignalWatcher::AnyReceived() const {
  for (int signo : signals_) {
    if (g_received[signo].load()) return true;
  }
  return false;
}

absl::optional<int> SignalWatcher::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    unsigned char byte = 0;
    if (read(g_pipe[0], &byte, 1) == 1) return static_cast<int>(byte);
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::nullopt;
    struct pollfd pfd = {g_pipe[0], POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(left) + 1;
    poll(&pfd, 1, static_cast<int>(ms > 1000000 ? 1000000 : ms));
  }
}

void SignalWatcher::Clear() {
  for (int signo : signals_) g_received[signo].store(false);
  unsigned char buf[64];
  while (read(g_pipe[0], buf, sizeof(buf)) > 0) {
  }
}

}  // namespace trainyard

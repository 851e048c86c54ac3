#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(SignalWatcherTest, RaisedSignalIsReceivedAndWaitReturnsIt) {
  auto watcher = SignalWatcher::Create({SIGTERM, SIGINT});
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  EXPECT_FALSE((*watcher)->AnyReceived());
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_TRUE((*watcher)->Received(SIGTERM));
  EXPECT_FALSE((*watcher)->Received(SIGINT));
  EXPECT_EQ((*watcher)->Wait(absl::Seconds(5)), absl::optional<int>(SIGTERM));
  // The wake-up was consumed; the flag stays until Clear.
  EXPECT_EQ((*watcher)->Wait(absl::Milliseconds(10)), absl::nullopt);
  EXPECT_TRUE((*watcher)->Received(SIGTERM));
  (*watcher)->Clear();
  EXPECT_FALSE((*watcher)->AnyReceived());
}

TEST(SignalWatcherTest, WaitTimesOutWithinBound) {
  auto watcher = SignalWatcher::Create({SIGUSR1});
  ASSERT_TRUE(watcher.ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ((*watcher)->Wait(absl::Milliseconds(50)), absl::nullopt);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(50));
  EXPECT_LT(waited, absl::Seconds(5));
}

TEST(SignalWatcherTest, OnlyOneAtATime) {
  auto first = SignalWatcher::Create({SIGUSR1});
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(SignalWatcher::Create({SIGUSR2}).status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  first->reset();
  EXPECT_TRUE(SignalWatcher::Create({SIGUSR2}).ok());
}

TEST(SignalWatcherTest, RestoresPreviousHandler) {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGUSR2, &ignore, nullptr), 0);
  {
    auto watcher = SignalWatcher::Create({SIGUSR2});
    ASSERT_TRUE(watcher.ok());
  }
  struct sigaction now = {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
}

TEST(SignalWatcherTest, RejectsOutOfRangeSignal) {
  EXPECT_THAT(SignalWatcher::Create({0}).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(SignalWatcher::Create({SIGTERM}).ok());  // state was released
}

TEST(IgnoreBrokenPipesTest, AWriteToAClosedPipeIsEpipeNotDeath) {
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  ASSERT_EQ(sigaction(SIGPIPE, &fallback, nullptr), 0);
  IgnoreBrokenPipes();
  struct sigaction now = {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  const char byte = 'x';
  EXPECT_EQ(write(fds[1], &byte, 1), -1);
  EXPECT_EQ(errno, EPIPE);
  close(fds[1]);
}

TEST(FailureSignalHandlerDeathTest, AFaultPrintsTheSignalAndTheStack) {
  EXPECT_DEATH(
      {
        InstallFailureSignalHandler("signals_test");
        raise(SIGSEGV);
      },
      "\\*\\*\\* SIGSEGV received at time=.*\n(.|\n)*@ ");
}

TEST(FailureSignalHandlerDeathTest, SigtermKeepsItsDisposition) {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGTERM, &ignore, nullptr), 0);
  InstallFailureSignalHandler("signals_test");
  struct sigaction now = {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  struct sigaction segv = {};
  ASSERT_EQ(sigaction(SIGSEGV, nullptr, &segv), 0);
  EXPECT_NE(segv.sa_handler, SIG_DFL);
  // Back to the defaults for the tests that follow.
  ignore.sa_handler = SIG_DFL;
  sigaction(SIGTERM, &ignore, nullptr);
  sigaction(SIGSEGV, &ignore, nullptr);
}

}  // namespace
}  // namespace trainyard

// The Gloo collective with its ranks in separate processes (forked before
// LibTorch does anything), meeting through a TCP store on an OS-chosen
// port: sums, maxima and minima against closed forms from 1 element to
// 64 MB, and a bounded timeout when a rank never arrives. Every child is
// reaped; a child that outlives the bound is killed and fails the test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/utils.h>

#include <chrono>
#include <functional>
#include <thread>

#include "collective/gloo_collective.h"
#include "collective/tcp_store.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

// Runs `body(rank, collective)` in `world` child processes; returns each
// child's exit code (0 = every check passed), or -1 for one killed at the
// bound.
std::vector<int> OnProcesses(int world, const std::function<int(int, Collective*)>& body,
                             absl::Duration timeout = absl::Seconds(30)) {
  int port_pipe[2];
  EXPECT_EQ(pipe(port_pipe), 0);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      signal(SIGPIPE, SIG_DFL);  // as a process started by a shell or Kubernetes
      torch::set_num_threads(1);
      absl::StatusOr<std::unique_ptr<TcpStore>> store;
      if (rank == 0) {
        store = TcpStore::Create("127.0.0.1", 0, true, world, absl::Seconds(30));
        if (!store.ok()) _exit(10);
        const int port = (*store)->port();
        for (int r = 1; r < world; ++r) {
          if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) _exit(11);
        }
      } else {
        int port = 0;
        if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) _exit(12);
        store = TcpStore::Create("127.0.0.1", static_cast<uint16_t>(port), false, world, absl::Seconds(30));
        if (!store.ok()) _exit(13);
      }
      GlooOptions options;
      options.timeout = timeout;
      auto collective = GlooCollective::Create(rank, world, std::shared_ptr<Store>(std::move(*store)), options);
      if (!collective.ok()) _exit(14);
      _exit(body(rank, collective->get()));
    }
    pids.push_back(pid);
  }
  close(port_pipe[0]);
  close(port_pipe[1]);
  std::vector<int> codes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    codes.push_back(status == -1 ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status)));
  }
  return codes;
}

TEST(GlooMultiProcessTest, ClosedFormsFromOneElementTo64MB) {
  constexpr int kWorld = 3;
  const std::vector<int> codes = OnProcesses(kWorld, [](int rank, Collective* c) {
    int failures = 0;
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20, int64_t{16} << 20}) {  // 4 B .. 64 MB
      const torch::Tensor base = torch::arange(n, torch::kFloat).remainder(4096);
      std::vector<torch::Tensor> t = {base + (rank + 1)};
      if (!c->AllReduce(t, ReduceOp::kSum).ok()) return 20;
      failures += !torch::equal(t[0], base * kWorld + 6);  // sum over r of (b + r + 1)
      t = {base * (rank + 1)};
      if (!c->AllReduce(t, ReduceOp::kMax).ok()) return 21;
      failures += !torch::equal(t[0], base * kWorld);
      t = {base - rank};
      if (!c->AllReduce(t, ReduceOp::kMin).ok()) return 22;
      failures += !torch::equal(t[0], base - (kWorld - 1));
    }
    std::vector<torch::Tensor> gathered;
    if (!c->AllGather(torch::full({2}, static_cast<int64_t>(rank * 7)), &gathered).ok()) return 23;
    for (int r = 0; r < kWorld; ++r) failures += gathered[r][1].item<int64_t>() != r * 7;
    return failures == 0 ? 0 : 30;
  });
  EXPECT_EQ(codes, std::vector<int>(kWorld, 0));
}

TEST(GlooMultiProcessTest, ARankThatNeverArrivesTimesOutTheOthers) {
  // Rank 1 joins and exits without reducing: rank 0 gets an error (the
  // connection closes, or the 2 s timeout passes) instead of hanging.
  const std::vector<int> codes = OnProcesses(
      2,
      [](int rank, Collective* c) {
        if (rank == 1) return 0;
        std::vector<torch::Tensor> t = {torch::ones({4})};
        const auto start = std::chrono::steady_clock::now();
        absl::Status s = c->AllReduce(t, ReduceOp::kSum);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const bool expected = absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s);
        return expected && took < 10 ? 0 : 40;
      },
      absl::Seconds(2));
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(GlooMultiProcessTest, APeerThatLeftIsAnErrorNotSigpipe) {
  // Rank 1 reduces once, then exits with rank 0's next 16 MB unread (its
  // kernel resets the connection); rank 0 goes on all-reducing. Gloo writes with writev: a
  // write after the reset raises SIGPIPE, which must not kill rank 0
  // (exit code 100 + 13) but end in an error status. Create leaves SIGPIPE
  // ignored.
  const std::vector<int> codes = OnProcesses(
      2,
      [](int rank, Collective* c) {
        struct sigaction now;
        if (sigaction(SIGPIPE, nullptr, &now) != 0 || now.sa_handler != SIG_IGN) return 50;
        std::vector<torch::Tensor> t = {torch::ones({4 << 20})};
        if (!c->AllReduce(t, ReduceOp::kSum).ok()) return 51;
        if (rank == 1) {
          // Exits with rank 0's next sends unread: its kernel resets.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          return 0;
        }
        for (int i = 0; i < 200; ++i) {
          if (!c->AllReduce(t, ReduceOp::kSum).ok()) return 0;
        }
        return 52;
      },
      absl::Seconds(5));
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace trainyard

// All-reduce bandwidth of the Gloo collective between two processes, side by
// side with the physical limit measured in the same run: raw loopback TCP
// with both directions busy at once (what each link of a 2-rank ring
// carries during an all-reduce).
//
// Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw *
// 2 (n - 1) / n, which for n = 2 equals algbw. Prints one JSON line per size.
//
//   bazel run --config=opt //bench:allreduce_bench -- [--max-mb 256] [--iters 5]
//
// The parent forks the two ranks before touching LibTorch; rank 0 hosts the
// rendezvous (collective/tcp_store.h on an OS-chosen port, passed to rank 1
// through a pipe). Each rank runs one intra-op thread.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/flags.h"
#include "collective/gloo_collective.h"
#include "collective/tcp_store.h"

namespace trainyard {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Sends and receives `bytes` at once over a connected socket; the seconds
// until both directions are done.
double Duplex(int fd, std::vector<char>& out, std::vector<char>& in, size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  std::thread sender([&] {
    size_t sent = 0;
    while (sent < bytes) {
      const ssize_t n =
          send(fd, out.data() + sent % out.size(), std::min(out.size() - sent % out.size(), bytes - sent), 0);
      if (n <= 0) std::abort();
      sent += static_cast<size_t>(n);
    }
  });
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = recv(fd, in.data(), std::min(in.size(), bytes - got), 0);
    if (n <= 0) std::abort();
    got += static_cast<size_t>(n);
  }
  sender.join();
  return Seconds(start, std::chrono::steady_clock::now());
}

int Rank(int rank, int port_in, int port_out, int max_mb, int iters, int bucket_mb) {
  torch::set_num_threads(1);
  absl::StatusOr<std::unique_ptr<TcpStore>> tcp;
  if (rank == 0) {
    tcp = TcpStore::Create("127.0.0.1", 0, true, 2, absl::Seconds(60));
    if (!tcp.ok()) return 1;
    const int port = (*tcp)->port();
    if (write(port_out, &port, sizeof(port)) != sizeof(port)) return 1;
  } else {
    int port = 0;
    if (read(port_in, &port, sizeof(port)) != sizeof(port)) return 1;
    tcp = TcpStore::Create("127.0.0.1", static_cast<uint16_t>(port), false, 2, absl::Seconds(60));
    if (!tcp.ok()) return 1;
  }
  std::shared_ptr<Store> store(std::move(*tcp));

  // Raw TCP: rank 0 listens on an OS-chosen port, rank 1 connects.
  int fd = -1;
  if (rank == 0) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1) != 0) return 1;
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    (void)store->Set("raw_port", std::to_string(ntohs(addr.sin_port)));
    fd = accept(listener, nullptr, nullptr);
    close(listener);
  } else {
    const int port = std::stoi(*store->Get("raw_port", absl::Seconds(60)));
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  GlooOptions gloo;
  gloo.timeout = absl::Seconds(120);
  gloo.bucket_bytes = static_cast<int64_t>(bucket_mb) << 20;
  absl::StatusOr<std::unique_ptr<GlooCollective>> collective = GlooCollective::Create(rank, 2, store, gloo);
  if (!collective.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, collective.status().ToString().c_str());
    return 1;
  }
  std::vector<char> out(4 << 20, 'x'), in(4 << 20);
  for (int mb = 1; mb <= max_mb; mb *= 4) {
    const size_t bytes = static_cast<size_t>(mb) << 20;
    std::vector<torch::Tensor> t = {torch::ones({static_cast<int64_t>(bytes / 4)})};
    std::vector<double> gloo_s, tcp_s;
    for (int i = 0; i <= iters; ++i) {  // the first of each is a warm-up
      if (!(*collective)->Barrier().ok()) return 1;
      auto start = std::chrono::steady_clock::now();
      if (!(*collective)->AllReduce(t, ReduceOp::kSum).ok()) return 1;
      const double g = Seconds(start, std::chrono::steady_clock::now());
      if (!(*collective)->Barrier().ok()) return 1;
      const double r = Duplex(fd, out, in, bytes);
      if (i > 0) {
        gloo_s.push_back(g);
        tcp_s.push_back(r);
      }
    }
    // Sums stay exact: 1 * 2^k for the k + 1 reductions above.
    if (t[0][0].item<float>() != static_cast<float>(1 << (iters + 1))) {
      std::fprintf(stderr, "wrong all-reduce result\n");
      return 1;
    }
    if (rank == 0) {
      const double g = Median(gloo_s), r = Median(tcp_s);
      const double busbw = static_cast<double>(bytes) / g / 1e9;  // x 2(n-1)/n = 1
      const double raw = static_cast<double>(bytes) / r / 1e9;
      std::printf(
          "{\"bench\":\"allreduce\",\"backend\":\"gloo\",\"ranks\":2,\"bucket_mb\":%d,\"size_bytes\":%zu,\"gloo_"
          "seconds\":%.6f,"
          "\"busbw_GBps\":%.3f,\"raw_tcp_duplex_GBps_per_direction\":%.3f,\"ratio\":%.3f}\n",
          bucket_mb, bytes, g, busbw, raw, busbw / raw);
      std::fflush(stdout);
    }
  }
  close(fd);
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  int max_mb = 256, iters = 5, bucket_mb = 25;
  trainyard::FlagSet flags("allreduce_bench [--max-mb N] [--iters N]",
                           "Gloo all-reduce bus bandwidth between 2 processes vs raw duplex loopback TCP.");
  flags.AddInt("max-mb", &max_mb, "N", "largest size in MB (sizes 1, 4, 16, ... up to it; default 256)");
  flags.AddInt("bucket-mb", &bucket_mb, "N", "the collective's bucket size in MB (default 25, the default)");
  flags.AddInt("iters", &iters, "N", "timed repetitions per size, after a warm-up (default 5)");
  std::vector<std::string> positional;
  if (auto code =
          flags.ParseCommand(std::vector<std::string>(argv + 1, argv + argc), &positional, std::cout, std::cerr)) {
    return *code;
  }
  int port_pipe[2];
  if (pipe(port_pipe) != 0) return 1;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) _exit(trainyard::Rank(rank, port_pipe[0], port_pipe[1], max_mb, iters, bucket_mb));
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed;
}

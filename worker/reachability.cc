#include "worker/reachability.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace trainyard {
namespace {

// Splits "host:port" / "[v6]:port"; false when malformed.
bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') return false;
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return false;
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
  return !host->empty() && !port->empty();
}

// A non-blocking socket connecting to `address`, or -1 (connected at once:
// *connected).
int StartConnect(const std::string& address, bool* connected) {
  *connected = false;
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) return -1;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) return -1;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, found->ai_protocol);
  if (fd >= 0) {
    if (connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      *connected = true;
    } else if (errno != EINPROGRESS) {
      close(fd);
      freeaddrinfo(found);
      return -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

}  // namespace

std::vector<bool> ReachableAddresses(const std::vector<std::string>& addresses, absl::Duration timeout) {
  const size_t n = addresses.size();
  std::vector<bool> reachable(n, false);
  std::vector<int> fds(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (addresses[i].empty()) {
      reachable[i] = true;
      continue;
    }
    bool connected = false;
    fds[i] = StartConnect(addresses[i], &connected);
    if (connected) reachable[i] = true;
  }
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  while (true) {
    std::vector<pollfd> waiting;
    std::vector<size_t> index;
    for (size_t i = 0; i < n; ++i) {
      if (fds[i] >= 0 && !reachable[i]) {
        waiting.push_back({fds[i], POLLOUT, 0});
        index.push_back(i);
      }
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (waiting.empty() || left <= 0) break;
    if (poll(waiting.data(), waiting.size(), static_cast<int>(left)) <= 0) continue;
    for (size_t k = 0; k < waiting.size(); ++k) {
      if (waiting[k].revents == 0) continue;
      const size_t i = index[k];
      int error = 0;
      socklen_t len = sizeof(error);
      const bool ok = getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
      if (ok) {
        reachable[i] = true;
      } else {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  return reachable;
}

}  // namespace trainyard

#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainyard {
namespace {

constexpr size_t kMaxRequestBytes = 8 << 10;
constexpr int kMaxConnections = 16;
constexpr int kTimeoutSeconds = 5;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

void WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string Format(const HttpResponse& r, bool head) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status), "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) out += r.body;
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& flag, const std::string& listen,
                                                              HttpHandler handler) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", listen, "'; expected HOST:PORT (port 0 = any)"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = listen.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", listen, "': ", gai_strerror(rc)));
  }
  auto server = std::unique_ptr<HttpServer>(new HttpServer);
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      server->listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  if (server->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on '", listen, "': ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(server->wake_fd_, O_CLOEXEC) != 0) {
    ::close(server->listen_fd_);
    return absl::InternalError("pipe2 failed");
  }
  server->handler_ = std::move(handler);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpServer::~HttpServer() {
  if (wake_fd_[1] >= 0) {
    const char stop = 1;
    (void)::write(wake_fd_[1], &stop, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<Connection> connections;
  {
    MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (Connection& c : connections) c.thread.join();  // each ends within its timeout
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    MutexLock lock(&mu_);
    // Finished connections are joined here; beyond the cap, new ones are
    // closed unanswered.
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    if (static_cast<int>(connections_.size()) >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    connections_.push_back({std::thread([this, fd, done] {
                              Serve(fd);
                              ::close(fd);
                              *done = true;
                            }),
                            done});
  }
}

void HttpServer::Serve(int fd) {
  timeval timeout{kTimeoutSeconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes) {
      WriteAll(fd, Format({431, "text/plain; charset=utf-8", "request too large\n"}, false));
      return;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or timed out
    request.append(buf, static_cast<size_t>(n));
  }
  WriteAll(fd, HandleHttpRequest(request, handler_));
}

std::string HandleHttpRequest(const std::string& raw, const HttpHandler& handler) {
  const std::string line = raw.substr(0, raw.find_first_of("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.") || parts[1].empty() || parts[1][0] != '/') {
    return Format({400, "text/plain; charset=utf-8", "bad request line\n"}, false);
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) return Format({405, "text/plain; charset=utf-8", "GET or HEAD only\n"}, false);
  return Format(handler(parts[1]), head);
}

HttpHandler MetricsAndHealthHandler(std::function<std::string()> render, std::function<bool()> healthy) {
  return [render = std::move(render), healthy = std::move(healthy)](const std::string& target) -> HttpResponse {
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", render()};
    if (path == "/healthz")
      return healthy() ? HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}
                       : HttpResponse{503, "text/plain; charset=utf-8", "unhealthy\n"};
    return {404, "text/plain; charset=utf-8", "not found; try /metrics or /healthz\n"};
  };
}

}  // namespace trainyard

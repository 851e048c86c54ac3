// A small HTTP/1.1 server for /metrics scrapes and health probes: GET and
// HEAD only, one request per connection, requests up to 8 KiB, at most 16
// connections served at once (more are closed at once), each given 5
// seconds. Not for anything else.
#ifndef TRAINYARD_COMMON_HTTP_SERVER_H_
#define TRAINYARD_COMMON_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace trainyard {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called with the request path (query string included).
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

class HttpServer {
 public:
  // Listens on HOST:PORT (port 0: chosen by the OS). kInvalidArgument
  // naming `flag` for a bad address, kUnavailable if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& flag, const std::string& listen,
                                                           HttpHandler handler);
  ~HttpServer();  // stops accepting and waits for the connections being served

  int port() const { return port_; }

 private:
  HttpServer() = default;
  void AcceptLoop();
  void Serve(int fd);

  HttpHandler handler_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: written to stop the accept loop
  int port_ = 0;
  std::thread acceptor_;
  Mutex mu_;
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Connection> connections_ ABSL_GUARDED_BY(mu_);
};

// The answer to one complete raw request (request line and headers):
// 400 for a malformed request line, 405 for methods other than GET and
// HEAD, else `handler`'s (without a body for HEAD). Exposed for tests.
std::string HandleHttpRequest(const std::string& raw, const HttpHandler& handler);

// The standard pages: /metrics from `render` (Prometheus text format),
// /healthz from `healthy` (200 "ok" or 503 "unhealthy"), 404 otherwise.
HttpHandler MetricsAndHealthHandler(std::function<std::string()> render, std::function<bool()> healthy);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_HTTP_SERVER_H_

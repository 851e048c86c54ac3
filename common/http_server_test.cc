#include "common/http_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` to 127.0.0.1:port and returns everything answered.
std::string Exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(HttpServerTest, ServesMetricsAndHealth) {
  bool healthy = true;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("--metrics-listen", "127.0.0.1:0",
                        MetricsAndHealthHandler([] { return std::string("t_up 1\n"); }, [&] { return healthy; }));
  ASSERT_THAT(server.status(), IsOk());
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 7\r\n"
            "Connection: close\r\n\r\nt_up 1\n");
  EXPECT_THAT(Exchange(port, "HEAD /metrics HTTP/1.0\r\n\r\n"),
              HasSubstr("Content-Length: 7\r\nConnection: close\r\n\r\n"));
  EXPECT_THAT(Exchange(port, "HEAD /metrics HTTP/1.0\r\n\r\n"), ::testing::Not(HasSubstr("t_up")));
  EXPECT_THAT(Exchange(port, "GET /healthz?x=1 HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200 OK"));
  healthy = false;
  EXPECT_THAT(Exchange(port, "GET /healthz HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 503 Service Unavailable"));
  EXPECT_THAT(Exchange(port, "GET /other HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(Exchange(port, "nonsense\r\n\r\n"), StartsWith("HTTP/1.1 400 Bad Request"));
  EXPECT_THAT(Exchange(port, "GET /" + std::string(10000, 'a') + " HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 431"));
}

TEST(HttpServerTest, BadAddressesNameTheFlag) {
  EXPECT_THAT(
      HttpServer::Start("--metrics-listen", "nocolon", nullptr).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--metrics-listen: 'nocolon'; expected HOST:PORT")));
  absl::StatusOr<std::unique_ptr<HttpServer>> first =
      HttpServer::Start("--metrics-listen", "127.0.0.1:0", MetricsAndHealthHandler(nullptr, nullptr));
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_THAT(HttpServer::Start("--metrics-listen", "127.0.0.1:" + std::to_string((*first)->port()), nullptr).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot listen")));
}

}  // namespace
}  // namespace trainyard

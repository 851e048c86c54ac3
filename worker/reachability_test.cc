#include "worker/reachability.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

// A listening socket on 127.0.0.1 with an OS-chosen port; its port.
int Listen(int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(*fd, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

TEST(ReachabilityTest, ListeningPortIsReachableAndAClosedOneIsNot) {
  int open_fd, closed_fd;
  const int open_port = Listen(&open_fd);
  const int closed_port = Listen(&closed_fd);
  close(closed_fd);  // nothing listens there now: refused
  const std::vector<bool> r = ReachableAddresses(
      {absl::StrCat("127.0.0.1:", open_port), "", absl::StrCat("127.0.0.1:", closed_port), "no-port", "[::1", ""},
      absl::Seconds(2));
  EXPECT_EQ(r, std::vector<bool>({true, true, false, false, false, true}));
  close(open_fd);
}

TEST(ReachabilityTest, SilenceEndsAtTheTimeout) {
  // TEST-NET-1 (RFC 5737): never routed; the connection either fails at
  // once (no route) or hears nothing until the timeout.
  const absl::Time start = absl::Now();
  const std::vector<bool> r = ReachableAddresses({"192.0.2.1:9"}, absl::Milliseconds(300));
  EXPECT_EQ(r, std::vector<bool>({false}));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace trainyard

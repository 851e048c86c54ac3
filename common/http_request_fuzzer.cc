// libFuzzer entry point for the metrics/health HTTP server's request
// handling: any bytes give a well-formed HTTP/1.1 response with a status
// line, a Content-Length equal to the body, and never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const trainyard::HttpHandler handler =
      trainyard::MetricsAndHealthHandler([] { return std::string("t_up 1\n"); }, [] { return true; });
  const std::string raw(reinterpret_cast<const char*>(data), size);
  const std::string out = trainyard::HandleHttpRequest(raw, handler);
  if (!absl::StartsWith(out, "HTTP/1.1 ")) std::abort();
  const size_t end = out.find("\r\n\r\n");
  if (end == std::string::npos) std::abort();
  const size_t at = out.find("Content-Length: ");
  if (at == std::string::npos || at > end) std::abort();
  uint64_t length = 0;
  const size_t eol = out.find("\r\n", at);
  if (!absl::SimpleAtoi(out.substr(at + 16, eol - at - 16), &length)) std::abort();
  const size_t body = out.size() - end - 4;
  if (body != length && body != 0) std::abort();  // HEAD: no body, the length of the GET's
  return 0;
}

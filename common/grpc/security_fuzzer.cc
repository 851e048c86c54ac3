// libFuzzer entry point for the authentication inputs: token files, the
// `authorization` metadata of a call, and listen addresses. Whatever the
// bytes: a Status, never a crash; only the exact token authenticates.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/grpc/security.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* known = [] {
    auto auth = trainyard::TokenAuthenticator::FromText("alice 0123456789abcdef-alice\n", "fixed");
    if (!auth.ok()) std::abort();
    return auth->release();
  }();
  const std::string input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<trainyard::TokenAuthenticator>> parsed =
      trainyard::TokenAuthenticator::FromText(input, "fuzz");
  if (parsed.ok() && (*parsed)->size() == 0) std::abort();  // a file without tokens is refused
  absl::StatusOr<std::string> name = known->Check(input);
  if (name.ok() != (input == "Bearer 0123456789abcdef-alice")) std::abort();
  if (!name.ok() && name.status().code() != absl::StatusCode::kUnauthenticated) std::abort();
  const bool loopback = trainyard::IsLoopbackListen(input);
  const absl::Status listen = trainyard::CheckListenSecurity("--listen", input, {}, false);
  if (listen.ok() != loopback) std::abort();
  return 0;
}

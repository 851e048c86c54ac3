// libFuzzer entry point for JobService.OpenSession's request validation:
// the bytes as a binary and as a text OpenSessionRequest. Whatever they
// hold: a Status naming a field, or a normalised request that is a fixed
// point (normalising it again changes nothing) and within the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "spec/session_request.h"

namespace {

void Check(const trainyard::OpenSessionRequest& request) {
  trainyard::ValidationOptions options;
  options.output_root = "/srv/trainyard";
  absl::StatusOr<trainyard::OpenSessionRequest> normalized = trainyard::NormalizeOpenSessionRequest(request, options);
  if (!normalized.ok()) {
    if (normalized.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return;
  }
  const auto& n = *normalized;
  if (n.batch_size() < 1 || n.batch_size() > 65536 || n.num_workers() < 1 || n.batch_size() % n.num_workers() != 0 ||
      n.wait_seconds() < 1 || n.wait_seconds() > 600 || n.idle_timeout_seconds() < 1) {
    std::abort();
  }
  if (!n.output_dir().empty() && n.output_dir().rfind("/srv/trainyard", 0) != 0) std::abort();
  absl::StatusOr<trainyard::OpenSessionRequest> again = trainyard::NormalizeOpenSessionRequest(n, options);
  if (!again.ok() || !google::protobuf::util::MessageDifferencer::Equals(n, *again)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainyard::OpenSessionRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size))) Check(request);
  request.Clear();
  google::protobuf::TextFormat::Parser parser;
  if (parser.ParseFromString(std::string(reinterpret_cast<const char*>(data), size), &request)) Check(request);
  return 0;
}

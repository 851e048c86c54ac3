#include "spec/session_request.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spec/jobspec.h"

namespace trainyard {

absl::StatusOr<OpenSessionRequest> NormalizeOpenSessionRequest(const OpenSessionRequest& original,
                                                               const ValidationOptions& options) {
  OpenSessionRequest request = original;
  if (request.batch_size() == 0) request.set_batch_size(32);
  if (request.batch_size() < 1 || request.batch_size() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", request.batch_size(), "; allowed 1..65536"));
  }
  if (request.feature_lengths().inputs() == 0) request.mutable_feature_lengths()->set_inputs(64);
  if (request.feature_lengths().targets() == 0) request.mutable_feature_lengths()->set_targets(64);
  if (request.feature_lengths().inputs() < 1 || request.feature_lengths().targets() < 1 ||
      request.feature_lengths().inputs() > 65536 || request.feature_lengths().targets() > 65536) {
    return absl::InvalidArgumentError("feature_lengths: inputs and targets must be in 1..65536");
  }
  if (request.idle_timeout_seconds() == 0) request.set_idle_timeout_seconds(300);
  if (request.wait_seconds() == 0) request.set_wait_seconds(10);
  if (request.wait_seconds() < 0 || request.wait_seconds() > 600) {
    return absl::InvalidArgumentError(absl::StrCat("wait_seconds: ", request.wait_seconds(), "; allowed 1..600"));
  }
  if (request.idle_timeout_seconds() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("idle_timeout_seconds: ", request.idle_timeout_seconds(), "; must be >= 1"));
  }
  if (!request.output_dir().empty()) {
    TY_ASSIGN_OR_RETURN(std::string dir, ResolveOutputDir("output_dir", request.output_dir(), options));
    request.set_output_dir(dir);
  }
  const int num_workers = request.num_workers() == 0 ? 1 : request.num_workers();
  if (num_workers < 1 || num_workers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers: ", request.num_workers(), "; allowed 1..1024"));
  }
  TY_RETURN_IF_ERROR(CheckBatchSplit(request.batch_size(), num_workers, /*num_microbatches=*/0, /*elastic=*/false));
  request.set_num_workers(num_workers);
  if (!request.inference().split().empty() || request.inference().num_batches() != 0) {
    return absl::InvalidArgumentError(
        "inference: split and num_batches do not apply: a session decodes the examples it is given");
  }
  TY_RETURN_IF_ERROR(NormalizeDecoding(request.mutable_inference(), request.feature_lengths().targets()));
  return request;
}

}  // namespace trainyard

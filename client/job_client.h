// A JobService client with absl::Status errors: what the CLI's job commands
// (submit, status, list, watch, cancel) and `trainyard local` use. Any other
// gRPC client of proto/job_service.proto works the same way.
#ifndef TRAINYARD_CLIENT_JOB_CLIENT_H_
#define TRAINYARD_CLIENT_JOB_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc/security.h"
#include "proto/job_service.grpc.pb.h"

namespace trainyard {

class JobClient {
 public:
  // `address` is HOST:PORT; calls wait up to `timeout` (WatchJob excepted).
  // TLS and the bearer token come from the environment (TRAINYARD_TLS_CA,
  // and TRAINYARD_TLS_CERT/KEY for a client certificate;
  // TRAINYARD_TOKEN or TRAINYARD_TOKEN_FILE): see common/grpc/security.h.
  explicit JobClient(const std::string& address, absl::Duration timeout = absl::Seconds(30));
  JobClient(const std::string& address, const TlsConfig& tls, std::string token,
            absl::Duration timeout = absl::Seconds(30));

  absl::StatusOr<SubmitJobResponse> Submit(const JobSpec& spec, const std::vector<std::string>& overrides);
  absl::StatusOr<JobInfo> Get(const std::string& job_id);
  // Jobs newest first, fetched a page at a time: at most `limit` (0: all).
  absl::StatusOr<std::vector<JobInfo>> List(int limit);
  absl::StatusOr<JobInfo> Cancel(const std::string& job_id, const std::string& reason);
  // Waits up to `timeout` (the call's deadline too) for the checkpoint.
  absl::StatusOr<CheckpointJobResponse> Checkpoint(const std::string& job_id, absl::Duration timeout);
  // Calls `on_event` for every event until the job ends (returns its final
  // JobInfo), the stream breaks, or `on_event` returns false.
  absl::StatusOr<JobInfo> Watch(const std::string& job_id, const std::function<bool(const JobEvent&)>& on_event);

  // Interactive sessions (the coordinator's idle workers serve them).
  // Opening loads the checkpoint and RunSession may decode long batches:
  // these wait up to `session_timeout`.
  absl::StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& request,
                                                  absl::Duration session_timeout = absl::Minutes(10));
  absl::StatusOr<SessionResponse> RunSession(const SessionRequest& request,
                                             absl::Duration session_timeout = absl::Minutes(10));
  absl::Status CloseSession(const std::string& session_id);

  // The address the client talks to, for messages.
  const std::string& address() const { return address_; }

 private:
  // Sets up the channel; a bad TLS file or token file becomes every
  // call's error.
  void Connect(const TlsConfig& tls);

  std::string address_;
  absl::Duration timeout_;
  std::string token_;
  bool tls_ = false;
  absl::Status setup_;
  std::unique_ptr<JobService::Stub> stub_;
};

// The coordinator address from --coordinator, else $TRAINYARD_COORDINATOR;
// kInvalidArgument when neither is set.
absl::StatusOr<std::string> CoordinatorAddress(const std::string& flag);

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_JOB_CLIENT_H_

#include "client/job_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/grpc/status.h"

namespace trainyard {
namespace {

absl::Status Annotated(const grpc::Status& status, const std::string& address, bool tls) {
  absl::Status s = FromGrpcStatus(status);
  if (absl::IsUnavailable(s)) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator ", address, " unreachable: ", s.message(),
        tls ? " (with TLS: is TRAINYARD_TLS_CA the CA that signed its certificate, and does the certificate "
              "name the address dialled? TRAINYARD_TLS_SERVER_NAME overrides the name)"
            : " (if it uses TLS, set TRAINYARD_TLS_CA)"));
  }
  return s;
}

}  // namespace

JobClient::JobClient(const std::string& address, absl::Duration timeout) : address_(address), timeout_(timeout) {
  absl::StatusOr<std::string> token = TokenFromEnv();
  if (token.ok()) {
    token_ = *token;
  } else {
    setup_ = token.status();
  }
  Connect(TlsConfigFromEnv());
}

JobClient::JobClient(const std::string& address, const TlsConfig& tls, std::string token, absl::Duration timeout)
    : address_(address), timeout_(timeout), token_(std::move(token)) {
  Connect(tls);
}

void JobClient::Connect(const TlsConfig& tls) {
  tls_ = tls.enabled();
  grpc::ChannelArguments args;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(tls, &args);
  if (!credentials.ok()) {
    if (setup_.ok()) setup_ = credentials.status();
    credentials = grpc::InsecureChannelCredentials();  // never used: calls fail with setup_
  }
  stub_ = JobService::NewStub(grpc::CreateCustomChannel(address_, *credentials, args));
}

#define TY_CALL(method, request, response)                                 \
  if (!setup_.ok()) return setup_;                                         \
  grpc::ClientContext ctx;                                                 \
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));            \
  AddBearerToken(token_, &ctx);                                            \
  if (grpc::Status s = stub_->method(&ctx, request, &response); !s.ok()) { \
    return Annotated(s, address_, tls_);                                   \
  }

absl::StatusOr<SubmitJobResponse> JobClient::Submit(const JobSpec& spec, const std::vector<std::string>& overrides) {
  SubmitJobRequest request;
  *request.mutable_spec() = spec;
  for (const std::string& o : overrides) request.add_overrides(o);
  SubmitJobResponse response;
  TY_CALL(SubmitJob, request, response);
  return response;
}

absl::StatusOr<JobInfo> JobClient::Get(const std::string& job_id) {
  GetJobRequest request;
  request.set_job_id(job_id);
  JobInfo response;
  TY_CALL(GetJob, request, response);
  return response;
}

absl::StatusOr<std::vector<JobInfo>> JobClient::List(int limit) {
  std::vector<JobInfo> jobs;
  ListJobsRequest request;
  while (true) {
    constexpr int kPage = 1000;  // the coordinator's largest page
    request.set_page_size(limit > 0 ? std::min<int64_t>(kPage, limit - static_cast<int64_t>(jobs.size())) : kPage);
    ListJobsResponse response;
    TY_CALL(ListJobs, request, response);
    jobs.insert(jobs.end(), response.jobs().begin(), response.jobs().end());
    if (response.next_page_token().empty() || (limit > 0 && static_cast<int64_t>(jobs.size()) >= limit)) break;
    request.set_page_token(response.next_page_token());
  }
  return jobs;
}

absl::StatusOr<JobInfo> JobClient::Cancel(const std::string& job_id, const std::string& reason) {
  CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  CancelJobResponse response;
  TY_CALL(CancelJob, request, response);
  return response.job();
}

absl::StatusOr<CheckpointJobResponse> JobClient::Checkpoint(const std::string& job_id, absl::Duration timeout) {
  if (!setup_.ok()) return setup_;
  CheckpointJobRequest request;
  request.set_job_id(job_id);
  request.set_timeout_seconds(static_cast<int32_t>(absl::ToInt64Seconds(timeout)));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(10)));
  AddBearerToken(token_, &ctx);
  CheckpointJobResponse response;
  if (grpc::Status s = stub_->CheckpointJob(&ctx, request, &response); !s.ok()) return Annotated(s, address_, tls_);
  return response;
}

absl::StatusOr<OpenSessionResponse> JobClient::OpenSession(const OpenSessionRequest& request,
                                                           absl::Duration session_timeout) {
  if (!setup_.ok()) return setup_;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + session_timeout));
  AddBearerToken(token_, &ctx);
  OpenSessionResponse response;
  if (grpc::Status s = stub_->OpenSession(&ctx, request, &response); !s.ok()) return Annotated(s, address_, tls_);
  return response;
}

absl::StatusOr<SessionResponse> JobClient::RunSession(const SessionRequest& request, absl::Duration session_timeout) {
  if (!setup_.ok()) return setup_;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + session_timeout));
  AddBearerToken(token_, &ctx);
  SessionResponse response;
  if (grpc::Status s = stub_->RunSession(&ctx, request, &response); !s.ok()) return Annotated(s, address_, tls_);
  return response;
}

absl::Status JobClient::CloseSession(const std::string& session_id) {
  CloseSessionRequest request;
  request.set_session_id(session_id);
  CloseSessionResponse response;
  TY_CALL(CloseSession, request, response);
  return absl::OkStatus();
}

#undef TY_CALL

absl::StatusOr<JobInfo> JobClient::Watch(const std::string& job_id,
                                         const std::function<bool(const JobEvent&)>& on_event) {
  WatchJobRequest request;
  request.set_job_id(job_id);
  if (!setup_.ok()) return setup_;
  grpc::ClientContext ctx;
  AddBearerToken(token_, &ctx);
  std::unique_ptr<grpc::ClientReader<JobEvent>> reader = stub_->WatchJob(&ctx, request);
  JobEvent event;
  JobInfo last;
  while (reader->Read(&event)) {
    last = event.job();
    if (!on_event(event)) {
      ctx.TryCancel();
      reader->Finish().ok();
      return last;
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Annotated(status, address_, tls_);
  return last;
}

absl::StatusOr<std::string> CoordinatorAddress(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("TRAINYARD_COORDINATOR"); env != nullptr && *env) return std::string(env);
  return absl::InvalidArgumentError("--coordinator: not given and TRAINYARD_COORDINATOR is not set; want HOST:PORT");
}

}  // namespace trainyard

#include "coordinator/coordinator_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc/status.h"

namespace trainyard {
namespace {

// Store keys live in one namespace per scope (job id and attempt).
std::string ScopedKey(const std::string& scope, const std::string& key) { return absl::StrCat(scope, "/", key); }

// Blocking store calls wait at most this long per RPC.
absl::Duration StoreTimeout(int64_t timeout_ms) {
  return absl::Milliseconds(std::clamp<int64_t>(timeout_ms, 0, 10 * 60 * 1000));
}

// A peer ("ipv4:10.0.0.7:51234", "ipv6:[::1]:9") without its port: every
// connection from one host counts as one client.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  if (colon == std::string::npos || colon + 1 == peer.size() ||
      peer.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return peer;
  }
  return peer.substr(0, colon);
}

}  // namespace

grpc::Status JobServiceImpl::Admit(const grpc::ServerContext& context, std::string* client) const {
  if (guard_.tokens != nullptr) {
    absl::StatusOr<std::string> name = guard_.tokens->Authenticate(context);
    if (!name.ok()) return ToGrpcStatus(name.status());
    if (client != nullptr) *client = *name;
  } else if (client != nullptr) {
    *client = PeerHost(context.peer());
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::Admit(const grpc::ServerContext& context) const {
  if (!require_client_certificate_ || PeerHasVerifiedCertificate(context)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "CoordinatorService is for workers: present a client certificate signed by the "
                      "coordinator's CA (--tls-cert/--tls-key)");
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context, const SubmitJobRequest* request,
                                       SubmitJobResponse* response) {
  std::string client;
  if (grpc::Status s = Admit(*context, &client); !s.ok()) return s;
  absl::Duration retry_after;
  if (guard_.submit_limiter != nullptr && !guard_.submit_limiter->Allow(client, &retry_after)) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("submit rate limit (", guard_.submit_limiter->rate(), " per second) reached for ",
                                     client, "; retry in ", absl::FormatDuration(retry_after)));
  }
  absl::StatusOr<SubmitJobResponse> r = coordinator_->SubmitJob(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const GetJobRequest* request, JobInfo* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<JobInfo> r = coordinator_->GetJob(request->job_id());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context, const ListJobsRequest* request,
                                      ListJobsResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<ListJobsResponse> r = coordinator_->ListJobs(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context, const CancelJobRequest* request,
                                       CancelJobResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<JobInfo> r = coordinator_->CancelJob(request->job_id(), request->reason());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response->mutable_job() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CheckpointJob(grpc::ServerContext* context, const CheckpointJobRequest* request,
                                           CheckpointJobResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<CheckpointJobResponse> r = coordinator_->CheckpointJob(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::OpenSession(grpc::ServerContext* context, const OpenSessionRequest* request,
                                         OpenSessionResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<OpenSessionResponse> r = coordinator_->OpenSession(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::RunSession(grpc::ServerContext* context, const SessionRequest* request,
                                        SessionResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<SessionResponse> r = coordinator_->RunSession(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CloseSession(grpc::ServerContext* context, const CloseSessionRequest* request,
                                          CloseSessionResponse*) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  return ToGrpcStatus(coordinator_->CloseSession(request->session_id()));
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* context, const WatchJobRequest* request,
                                      grpc::ServerWriter<JobEvent>* writer) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  int64_t version = 0;
  JobState last_state = JOB_STATE_UNSPECIFIED;
  while (!context->IsCancelled()) {
    const int64_t before = version;
    absl::StatusOr<JobInfo> job = coordinator_->WaitForChange(request->job_id(), &version, absl::Milliseconds(500));
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (version == before) continue;  // timed out: check the client is still there
    JobEvent event;
    event.set_kind(job->state() != last_state ? JobEvent::STATE_CHANGED : JobEvent::PROGRESS);
    last_state = job->state();
    *event.mutable_job() = std::move(*job);
    if (!writer->Write(event)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    if (IsFinal(last_state)) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
}

grpc::Status CoordinatorServiceImpl::RegisterWorker(grpc::ServerContext* context, const RegisterWorkerRequest* request,
                                                    RegisterWorkerResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<RegisterWorkerResponse> r = coordinator_->RegisterWorker(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                                               HeartbeatResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<HeartbeatResponse> r = coordinator_->Heartbeat(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreSet(grpc::ServerContext* context, const StoreSetRequest* request,
                                              StoreSetResponse*) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  return ToGrpcStatus(coordinator_->store()->Set(ScopedKey(request->scope(), request->key()), request->value()));
}

grpc::Status CoordinatorServiceImpl::StoreGet(grpc::ServerContext* context, const StoreGetRequest* request,
                                              StoreGetResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<std::string> value =
      coordinator_->store()->Get(ScopedKey(request->scope(), request->key()), StoreTimeout(request->timeout_ms()));
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(std::move(*value));
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreAdd(grpc::ServerContext* context, const StoreAddRequest* request,
                                              StoreAddResponse* response) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  absl::StatusOr<int64_t> value =
      coordinator_->store()->Add(ScopedKey(request->scope(), request->key()), request->delta());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreWait(grpc::ServerContext* context, const StoreWaitRequest* request,
                                               StoreWaitResponse*) {
  if (grpc::Status s = Admit(*context); !s.ok()) return s;
  std::vector<std::string> keys;
  for (const std::string& k : request->keys()) keys.push_back(ScopedKey(request->scope(), k));
  return ToGrpcStatus(coordinator_->store()->Wait(keys, StoreTimeout(request->timeout_ms())));
}

}  // namespace trainyard

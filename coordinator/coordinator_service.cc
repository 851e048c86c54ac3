#include "coordinator/coordinator_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace trainyard {
namespace {

// Store keys live in one namespace per scope (job id and attempt).
std::string ScopedKey(const std::string& scope, const std::string& key) { return absl::StrCat(scope, "/", key); }

// Blocking store calls wait at most this long per RPC.
absl::Duration StoreTimeout(int64_t timeout_ms) {
  return absl::Milliseconds(std::clamp<int64_t>(timeout_ms, 0, 10 * 60 * 1000));
}

}  // namespace

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*, const SubmitJobRequest* request,
                                       SubmitJobResponse* response) {
  absl::StatusOr<SubmitJobResponse> r = coordinator_->SubmitJob(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const GetJobRequest* request, JobInfo* response) {
  absl::StatusOr<JobInfo> r = coordinator_->GetJob(request->job_id());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const ListJobsRequest* request,
                                      ListJobsResponse* response) {
  *response = coordinator_->ListJobs(*request);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*, const CancelJobRequest* request,
                                       CancelJobResponse* response) {
  absl::StatusOr<JobInfo> r = coordinator_->CancelJob(request->job_id(), request->reason());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response->mutable_job() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::OpenSession(grpc::ServerContext*, const OpenSessionRequest* request,
                                         OpenSessionResponse* response) {
  absl::StatusOr<OpenSessionResponse> r = coordinator_->OpenSession(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::RunSession(grpc::ServerContext*, const SessionRequest* request,
                                        SessionResponse* response) {
  absl::StatusOr<SessionResponse> r = coordinator_->RunSession(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CloseSession(grpc::ServerContext*, const CloseSessionRequest* request,
                                          CloseSessionResponse*) {
  return ToGrpcStatus(coordinator_->CloseSession(request->session_id()));
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* context, const WatchJobRequest* request,
                                      grpc::ServerWriter<JobEvent>* writer) {
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

grpc::Status CoordinatorServiceImpl::RegisterWorker(grpc::ServerContext*, const RegisterWorkerRequest* request,
                                                    RegisterWorkerResponse* response) {
  absl::StatusOr<RegisterWorkerResponse> r = coordinator_->RegisterWorker(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::Heartbeat(grpc::ServerContext*, const HeartbeatRequest* request,
                                               HeartbeatResponse* response) {
  absl::StatusOr<HeartbeatResponse> r = coordinator_->Heartbeat(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreSet(grpc::ServerContext*, const StoreSetRequest* request,
                                              StoreSetResponse*) {
  return ToGrpcStatus(coordinator_->store()->Set(ScopedKey(request->scope(), request->key()), request->value()));
}

grpc::Status CoordinatorServiceImpl::StoreGet(grpc::ServerContext*, const StoreGetRequest* request,
                                              StoreGetResponse* response) {
  absl::StatusOr<std::string> value =
      coordinator_->store()->Get(ScopedKey(request->scope(), request->key()), StoreTimeout(request->timeout_ms()));
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(std::move(*value));
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreAdd(grpc::ServerContext*, const StoreAddRequest* request,
                                              StoreAddResponse* response) {
  absl::StatusOr<int64_t> value =
      coordinator_->store()->Add(ScopedKey(request->scope(), request->key()), request->delta());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::StoreWait(grpc::ServerContext*, const StoreWaitRequest* request,
                                               StoreWaitResponse*) {
  std::vector<std::string> keys;
  for (const std::string& k : request->keys()) keys.push_back(ScopedKey(request->scope(), k));
  return ToGrpcStatus(coordinator_->store()->Wait(keys, StoreTimeout(request->timeout_ms())));
}

}  // namespace trainyard

#include "worker/worker_service.h"

#include <utility>

#include "common/grpc/status.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

template <typename Response>
grpc::Status Reply(absl::StatusOr<Response> result, Response* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status WorkerServiceImpl::StartJob(grpc::ServerContext*, const StartJobRequest* request,
                                         StartJobResponse* response) {
  return Reply(core_->StartJob(*request), response);
}

grpc::Status WorkerServiceImpl::RunSteps(grpc::ServerContext*, const RunStepsRequest* request,
                                         RunStepsResponse* response) {
  absl::StatusOr<RunStepsResponse> ran = core_->RunSteps(*request);
  if (!ran.ok()) {
    spdlog::warn("job {}: RunSteps({}, {}) failed: {}", request->job_id(), request->first_step(), request->num_steps(),
                 ran.status().ToString());
  }
  return Reply(std::move(ran), response);
}

grpc::Status WorkerServiceImpl::Regroup(grpc::ServerContext*, const RegroupRequest* request,
                                        RegroupResponse* response) {
  return Reply(core_->Regroup(*request), response);
}

grpc::Status WorkerServiceImpl::Evaluate(grpc::ServerContext*, const EvaluateRequest* request,
                                         EvaluateResponse* response) {
  return Reply(core_->Evaluate(*request), response);
}

grpc::Status WorkerServiceImpl::OpenSession(grpc::ServerContext*, const WorkerOpenSessionRequest* request,
                                            OpenSessionResponse* response) {
  return Reply(core_->OpenSession(*request), response);
}

grpc::Status WorkerServiceImpl::RunSession(grpc::ServerContext*, const SessionRequest* request,
                                           SessionResponse* response) {
  return Reply(core_->RunSession(*request), response);
}

grpc::Status WorkerServiceImpl::Infer(grpc::ServerContext*, const InferRequest* request, InferResponse* response) {
  return Reply(core_->Infer(*request), response);
}

grpc::Status WorkerServiceImpl::SaveCheckpoint(grpc::ServerContext*, const SaveCheckpointRequest* request,
                                               SaveCheckpointResponse* response) {
  return Reply(core_->SaveCheckpoint(*request), response);
}

grpc::Status WorkerServiceImpl::Probe(grpc::ServerContext*, const ProbeRequest* request, ProbeResponse* response) {
  return Reply(core_->Probe(*request), response);
}

grpc::Status WorkerServiceImpl::LeaveGroup(grpc::ServerContext*, const LeaveGroupRequest* request,
                                           LeaveGroupResponse* response) {
  return Reply(core_->LeaveGroup(*request), response);
}

grpc::Status WorkerServiceImpl::Adopt(grpc::ServerContext*, const AdoptRequest* request, AdoptResponse* response) {
  return Reply(core_->Adopt(*request), response);
}

grpc::Status WorkerServiceImpl::AbortJob(grpc::ServerContext*, const AbortJobRequest* request, AbortJobResponse*) {
  return ToGrpcStatus(core_->AbortJob(*request));
}

}  // namespace trainyard

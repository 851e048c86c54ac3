// WorkerService over a WorkerCore: translates messages and Status codes.
#ifndef TRAINYARD_WORKER_WORKER_SERVICE_H_
#define TRAINYARD_WORKER_WORKER_SERVICE_H_

#include "proto/worker.grpc.pb.h"
#include "worker/worker_core.h"

namespace trainyard {

class WorkerServiceImpl final : public WorkerService::Service {
 public:
  explicit WorkerServiceImpl(WorkerCore* core) : core_(core) {}
  grpc::Status StartJob(grpc::ServerContext*, const StartJobRequest* request, StartJobResponse* response) override;
  grpc::Status RunSteps(grpc::ServerContext*, const RunStepsRequest* request, RunStepsResponse* response) override;
  grpc::Status Regroup(grpc::ServerContext*, const RegroupRequest* request, RegroupResponse* response) override;
  grpc::Status Evaluate(grpc::ServerContext*, const EvaluateRequest* request, EvaluateResponse* response) override;
  grpc::Status Infer(grpc::ServerContext*, const InferRequest* request, InferResponse* response) override;
  grpc::Status OpenSession(grpc::ServerContext*, const WorkerOpenSessionRequest* request,
                           OpenSessionResponse* response) override;
  grpc::Status RunSession(grpc::ServerContext*, const SessionRequest* request, SessionResponse* response) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext*, const SaveCheckpointRequest* request,
                              SaveCheckpointResponse* response) override;
  grpc::Status AbortJob(grpc::ServerContext*, const AbortJobRequest* request, AbortJobResponse* response) override;
  grpc::Status Probe(grpc::ServerContext*, const ProbeRequest* request, ProbeResponse* response) override;
  grpc::Status LeaveGroup(grpc::ServerContext*, const LeaveGroupRequest* request,
                          LeaveGroupResponse* response) override;
  grpc::Status Adopt(grpc::ServerContext*, const AdoptRequest* request, AdoptResponse* response) override;

 private:
  WorkerCore* core_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_WORKER_SERVICE_H_

// The coordinator's handle on one worker's WorkerService. The production
// implementation speaks gRPC (grpc_worker_client.h); tests substitute fakes.
//
// Thread-safety: calls may run concurrently; CancelInFlight makes every call
// in progress return kCancelled promptly.
#ifndef TRAINYARD_COORDINATOR_WORKER_CLIENT_H_
#define TRAINYARD_COORDINATOR_WORKER_CLIENT_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/worker_registry.h"
#include "proto/worker.pb.h"

namespace trainyard {

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual absl::StatusOr<StartJobResponse> StartJob(const StartJobRequest& request) = 0;
  virtual absl::StatusOr<RunStepsResponse> RunSteps(const RunStepsRequest& request) = 0;
  virtual absl::StatusOr<EvaluateResponse> Evaluate(const EvaluateRequest& request) = 0;
  virtual absl::StatusOr<InferResponse> Infer(const InferRequest& request) = 0;
  virtual absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request) = 0;
  virtual absl::StatusOr<OpenSessionResponse> OpenSession(const WorkerOpenSessionRequest& request) = 0;
  virtual absl::StatusOr<SessionResponse> RunSession(const SessionRequest& request) = 0;
  virtual absl::Status AbortJob(const AbortJobRequest& request) = 0;
  virtual void CancelInFlight() = 0;
};

using WorkerClientFactory = std::function<std::unique_ptr<WorkerClient>(const WorkerRecord& worker)>;

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_WORKER_CLIENT_H_

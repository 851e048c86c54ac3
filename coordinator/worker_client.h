// The coordinator's handle on one worker's WorkerService. The production
// implementation speaks gRPC (grpc_worker_client.h); tests substitute fakes.
//
// Thread-safety: calls may run concurrently; CancelInFlight makes every call
// in progress return kCancelled promptly.
#ifndef TRAINYARD_COORDINATOR_WORKER_CLIENT_H_
#define TRAINYARD_COORDINATOR_WORKER_CLIENT_H_

#include <functional>
#include <memory>
#include <thread>
#include <utility>

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
  // fault_tolerance ELASTIC (WorkerService.Regroup); kUnimplemented for a
  // client without it (test fakes of jobs that never regroup).
  virtual absl::StatusOr<RegroupResponse> Regroup(const RegroupRequest&) {
    return absl::UnimplementedError("this worker client does not regroup");
  }
  virtual void CancelInFlight() = 0;

  // The asynchronous forms the coordinator fans a gang's calls out with (no
  // thread per rank): each starts the call and returns; `done` runs once,
  // when the call ends, on a thread of the transport (or, for a call that
  // fails at once, maybe inside the Start call: hold no lock `done` takes).
  // CancelInFlight ends these too. The client must outlive the call. The
  // defaults (test fakes) run the synchronous form on a thread of its own.
  template <typename Response>
  using Done = std::function<void(absl::StatusOr<Response>)>;
  virtual void StartJobAsync(const StartJobRequest& request, Done<StartJobResponse> done) {
    Detach([this, request] { return StartJob(request); }, std::move(done));
  }
  virtual void RunStepsAsync(const RunStepsRequest& request, Done<RunStepsResponse> done) {
    Detach([this, request] { return RunSteps(request); }, std::move(done));
  }
  virtual void RegroupAsync(const RegroupRequest& request, Done<RegroupResponse> done) {
    Detach([this, request] { return Regroup(request); }, std::move(done));
  }
  virtual void EvaluateAsync(const EvaluateRequest& request, Done<EvaluateResponse> done) {
    Detach([this, request] { return Evaluate(request); }, std::move(done));
  }
  virtual void InferAsync(const InferRequest& request, Done<InferResponse> done) {
    Detach([this, request] { return Infer(request); }, std::move(done));
  }
  virtual void SaveCheckpointAsync(const SaveCheckpointRequest& request, Done<SaveCheckpointResponse> done) {
    Detach([this, request] { return SaveCheckpoint(request); }, std::move(done));
  }
  virtual void OpenSessionAsync(const WorkerOpenSessionRequest& request, Done<OpenSessionResponse> done) {
    Detach([this, request] { return OpenSession(request); }, std::move(done));
  }
  virtual void RunSessionAsync(const SessionRequest& request, Done<SessionResponse> done) {
    Detach([this, request] { return RunSession(request); }, std::move(done));
  }
  virtual void AbortJobAsync(const AbortJobRequest& request, std::function<void(absl::Status)> done) {
    std::thread([this, request, done = std::move(done)] { done(AbortJob(request)); }).detach();
  }

 private:
  template <typename Call, typename Response>
  static void Detach(Call call, Done<Response> done) {
    std::thread([call = std::move(call), done = std::move(done)] { done(call()); }).detach();
  }
};

using WorkerClientFactory = std::function<std::unique_ptr<WorkerClient>(const WorkerRecord& worker)>;

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_WORKER_CLIENT_H_

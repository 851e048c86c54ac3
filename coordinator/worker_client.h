// The coordinator's handle on one worker's WorkerService, asynchronous
// only. The production implementation speaks gRPC (grpc_worker_client.h);
// tests use coordinator/testing/fake_worker_client.h, which lets each test
// decide when and how every call completes.
//
// Thread-safety: calls may be started concurrently from any thread.
#ifndef TRAINYARD_COORDINATOR_WORKER_CLIENT_H_
#define TRAINYARD_COORDINATOR_WORKER_CLIENT_H_

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/worker_registry.h"
#include "proto/worker.pb.h"

namespace trainyard {

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;

  // Each call starts and returns; `done` runs once, when the call ends, on a
  // thread of the transport (or, for a call that fails at once, maybe inside
  // the call that started it: hold no lock `done` takes). The coordinator
  // fans a gang's calls out this way, with no thread per rank
  // (coordinator/fan_out.h). The client must outlive its calls.
  template <typename Response>
  using Done = std::function<void(absl::StatusOr<Response>)>;
  virtual void StartJobAsync(const StartJobRequest& request, Done<StartJobResponse> done) = 0;
  virtual void RunStepsAsync(const RunStepsRequest& request, Done<RunStepsResponse> done) = 0;
  // fault_tolerance ELASTIC (WorkerService.Regroup).
  virtual void RegroupAsync(const RegroupRequest& request, Done<RegroupResponse> done) = 0;
  virtual void EvaluateAsync(const EvaluateRequest& request, Done<EvaluateResponse> done) = 0;
  virtual void InferAsync(const InferRequest& request, Done<InferResponse> done) = 0;
  virtual void SaveCheckpointAsync(const SaveCheckpointRequest& request, Done<SaveCheckpointResponse> done) = 0;
  virtual void OpenSessionAsync(const WorkerOpenSessionRequest& request, Done<OpenSessionResponse> done) = 0;
  virtual void RunSessionAsync(const SessionRequest& request, Done<SessionResponse> done) = 0;
  virtual void AbortJobAsync(const AbortJobRequest& request, std::function<void(absl::Status)> done) = 0;
  // The watchdog's (coordinator/watchdog.h): ends by `deadline` at the
  // latest (kDeadlineExceeded: a stopped or cut-off worker).
  virtual void ProbeAsync(const ProbeRequest& request, absl::Duration deadline, Done<ProbeResponse> done) = 0;
  virtual void LeaveGroupAsync(const LeaveGroupRequest& request, Done<LeaveGroupResponse> done) = 0;
  // A restarted coordinator takes over a running attempt (WorkerService.Adopt).
  virtual void AdoptAsync(const AdoptRequest& request, Done<AdoptResponse> done) = 0;

  // Ends every call in progress on this client promptly with kCancelled.
  virtual void CancelInFlight() = 0;
};

using WorkerClientFactory = std::function<std::unique_ptr<WorkerClient>(const WorkerRecord& worker)>;

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_WORKER_CLIENT_H_

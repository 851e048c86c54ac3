// A fake worker for the coordinator's tests, whose test decides when and how
// each call completes (no sockets, no worker process).
//
// A FakeWorker stands for one worker host. The coordinator reaches it through
// WorkerClients made by Connect (one per connection, as the gRPC client
// factory makes them). Each call is numbered per method (1-based, over every
// client of the worker) and then, as the test chose for its method:
//   - answered by the Responder, on a thread of the fake transport (the
//     default), as gRPC's callback threads answer the real client; or
//   - held: it waits until the test takes it (WaitForHeld) and answers it
//     (Respond: as the Responder would; Reply: with a response of the test's;
//     Fail: with a status), or until CancelInFlight on its client ends it with
//     kCancelled, as cancelling the gRPC client's calls does.
// Whichever comes first completes the call; the other is a no-op. `done`
// always runs on a transport thread, never inside the call that started it
// nor on the test's thread.
//
// Thread-safety: thread-safe. The FakeWorker must outlive its clients and the
// coordinator using them; its destructor cancels the calls still held and
// waits for the transport's threads.
#ifndef TRAINYARD_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_
#define TRAINYARD_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/background_threads.h"
#include "common/mutex.h"
#include "coordinator/worker_client.h"
#include "google/protobuf/message.h"

namespace trainyard {

enum class WorkerMethod {
  kStartJob,
  kRunSteps,
  kRegroup,
  kEvaluate,
  kInfer,
  kSaveCheckpoint,
  kOpenSession,
  kRunSession,
  kAbortJob,
  kProbe,
  kLeaveGroup,
  kAdopt,
};

class FakeWorker {
 public:
  // How a worker answers, computed when the call is answered. Each method
  // not overridden answers kUnimplemented naming it. Called on transport
  // threads, possibly several at once.
  class Responder {
   public:
    virtual ~Responder() = default;
    virtual absl::StatusOr<StartJobResponse> StartJob(const StartJobRequest& request);
    virtual absl::StatusOr<RunStepsResponse> RunSteps(const RunStepsRequest& request);
    virtual absl::StatusOr<RegroupResponse> Regroup(const RegroupRequest& request);
    virtual absl::StatusOr<EvaluateResponse> Evaluate(const EvaluateRequest& request);
    virtual absl::StatusOr<InferResponse> Infer(const InferRequest& request);
    virtual absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request);
    virtual absl::StatusOr<OpenSessionResponse> OpenSession(const WorkerOpenSessionRequest& request);
    virtual absl::StatusOr<SessionResponse> RunSession(const SessionRequest& request);
    virtual absl::Status AbortJob(const AbortJobRequest& request);
    virtual absl::StatusOr<ProbeResponse> Probe(const ProbeRequest& request);
    virtual absl::StatusOr<LeaveGroupResponse> LeaveGroup(const LeaveGroupRequest& request);
    virtual absl::StatusOr<AdoptResponse> Adopt(const AdoptRequest& request);
  };

  struct Call;  // one call, from its start to its completion

  // A held call, taken by the test. Answer it once; one dropped unanswered
  // is failed with kAborted so that nothing waits for it forever.
  class HeldCall {
   public:
    HeldCall(FakeWorker* worker, std::shared_ptr<Call> call) : worker_(worker), call_(std::move(call)) {}
    ~HeldCall();
    HeldCall(const HeldCall&) = delete;
    HeldCall& operator=(const HeldCall&) = delete;

    const google::protobuf::Message& request() const;
    int number() const;  // per method, 1-based

    void Respond();  // as the Responder answers it now
    void Reply(const google::protobuf::Message& response);
    void Fail(const absl::Status& status);

   private:
    FakeWorker* const worker_;
    std::shared_ptr<Call> call_;
  };

  explicit FakeWorker(std::shared_ptr<Responder> responder) : responder_(std::move(responder)) {}
  ~FakeWorker();
  FakeWorker(const FakeWorker&) = delete;
  FakeWorker& operator=(const FakeWorker&) = delete;

  // A new connection to this worker.
  std::unique_ptr<WorkerClient> Connect();

  // Holds every call of `method` started from now on, until StopHolding.
  void Hold(WorkerMethod method) ABSL_LOCKS_EXCLUDED(mu_);
  // Holds the call of `method` numbered `number` (1-based) only.
  void HoldCall(WorkerMethod method, int number) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers the calls of `method` started from now on (those held stay so).
  void StopHolding(WorkerMethod method) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits up to `timeout` for a held call of `method` the test has not taken
  // yet, and takes the oldest; nullptr at the timeout.
  std::unique_ptr<HeldCall> WaitForHeld(WorkerMethod method, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls of `method` started so far.
  int calls(WorkerMethod method) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Client;
  friend class Client;

  // Numbers `call` and answers it now or holds it.
  void Start(std::shared_ptr<Call> call) ABSL_LOCKS_EXCLUDED(mu_);
  // Completes `call` with `outcome` on a transport thread unless it was
  // completed before; false if it was.
  bool Complete(const std::shared_ptr<Call>& call, std::function<void()> outcome) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails every call of client `client_id` still held with kCancelled.
  void Cancel(int client_id) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<Responder> responder_;
  mutable Mutex mu_;
  CondVar held_changed_;
  int clients_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<WorkerMethod, int> started_ ABSL_GUARDED_BY(mu_);
  std::set<WorkerMethod> hold_all_ ABSL_GUARDED_BY(mu_);
  std::map<WorkerMethod, std::set<int>> hold_numbers_ ABSL_GUARDED_BY(mu_);
  // Held calls, oldest first: not yet completed (taken or not).
  std::vector<std::shared_ptr<Call>> held_ ABSL_GUARDED_BY(mu_);
  BackgroundThreads transport_;  // last: joined before the rest goes
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_TESTING_FAKE_WORKER_CLIENT_H_

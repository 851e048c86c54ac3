#include "coordinator/testing/fake_worker_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace trainyard {
namespace {

const char* MethodName(WorkerMethod method) {
  switch (method) {
    case WorkerMethod::kStartJob:
      return "StartJob";
    case WorkerMethod::kRunSteps:
      return "RunSteps";
    case WorkerMethod::kRegroup:
      return "Regroup";
    case WorkerMethod::kEvaluate:
      return "Evaluate";
    case WorkerMethod::kInfer:
      return "Infer";
    case WorkerMethod::kSaveCheckpoint:
      return "SaveCheckpoint";
    case WorkerMethod::kOpenSession:
      return "OpenSession";
    case WorkerMethod::kRunSession:
      return "RunSession";
    case WorkerMethod::kAbortJob:
      return "AbortJob";
    case WorkerMethod::kProbe:
      return "Probe";
    case WorkerMethod::kLeaveGroup:
      return "LeaveGroup";
    case WorkerMethod::kAdopt:
      return "Adopt";
  }
  return "?";
}

absl::Status NoAnswer(WorkerMethod method) {
  return absl::UnimplementedError(absl::StrCat("this fake worker does not answer ", MethodName(method)));
}

}  // namespace

struct FakeWorker::Call {
  WorkerMethod method;
  int client_id = 0;
  int number = 0;  // set by Start
  std::shared_ptr<const google::protobuf::Message> request;
  std::function<void()> respond;  // asks the Responder, hands its answer on
  std::function<void(const google::protobuf::Message&)> reply;
  std::function<void(absl::Status)> fail;
  bool taken = false;      // by the test (guarded by FakeWorker::mu_)
  bool completed = false;  // (guarded by FakeWorker::mu_)
};

// ---------------------------------------------------------------------------
// Responder's defaults.

absl::StatusOr<StartJobResponse> FakeWorker::Responder::StartJob(const StartJobRequest&) {
  return NoAnswer(WorkerMethod::kStartJob);
}
absl::StatusOr<RunStepsResponse> FakeWorker::Responder::RunSteps(const RunStepsRequest&) {
  return NoAnswer(WorkerMethod::kRunSteps);
}
absl::StatusOr<RegroupResponse> FakeWorker::Responder::Regroup(const RegroupRequest&) {
  return NoAnswer(WorkerMethod::kRegroup);
}
absl::StatusOr<EvaluateResponse> FakeWorker::Responder::Evaluate(const EvaluateRequest&) {
  return NoAnswer(WorkerMethod::kEvaluate);
}
absl::StatusOr<InferResponse> FakeWorker::Responder::Infer(const InferRequest&) {
  return NoAnswer(WorkerMethod::kInfer);
}
absl::StatusOr<SaveCheckpointResponse> FakeWorker::Responder::SaveCheckpoint(const SaveCheckpointRequest&) {
  return NoAnswer(WorkerMethod::kSaveCheckpoint);
}
absl::StatusOr<OpenSessionResponse> FakeWorker::Responder::OpenSession(const WorkerOpenSessionRequest&) {
  return NoAnswer(WorkerMethod::kOpenSession);
}
absl::StatusOr<SessionResponse> FakeWorker::Responder::RunSession(const SessionRequest&) {
  return NoAnswer(WorkerMethod::kRunSession);
}
absl::Status FakeWorker::Responder::AbortJob(const AbortJobRequest&) { return NoAnswer(WorkerMethod::kAbortJob); }
absl::StatusOr<ProbeResponse> FakeWorker::Responder::Probe(const ProbeRequest&) {
  return NoAnswer(WorkerMethod::kProbe);
}
absl::StatusOr<LeaveGroupResponse> FakeWorker::Responder::LeaveGroup(const LeaveGroupRequest&) {
  return NoAnswer(WorkerMethod::kLeaveGroup);
}
absl::StatusOr<AdoptResponse> FakeWorker::Responder::Adopt(const AdoptRequest&) {
  return NoAnswer(WorkerMethod::kAdopt);
}

// ---------------------------------------------------------------------------
// The client: each call becomes a Call the worker answers or holds.

class FakeWorker::Client : public WorkerClient {
 public:
  Client(FakeWorker* worker, int id) : worker_(worker), id_(id) {}

  void StartJobAsync(const StartJobRequest& request, Done<StartJobResponse> done) override {
    Issue(WorkerMethod::kStartJob, request, std::move(done), &Responder::StartJob);
  }
  void RunStepsAsync(const RunStepsRequest& request, Done<RunStepsResponse> done) override {
    Issue(WorkerMethod::kRunSteps, request, std::move(done), &Responder::RunSteps);
  }
  void RegroupAsync(const RegroupRequest& request, Done<RegroupResponse> done) override {
    Issue(WorkerMethod::kRegroup, request, std::move(done), &Responder::Regroup);
  }
  void EvaluateAsync(const EvaluateRequest& request, Done<EvaluateResponse> done) override {
    Issue(WorkerMethod::kEvaluate, request, std::move(done), &Responder::Evaluate);
  }
  void InferAsync(const InferRequest& request, Done<InferResponse> done) override {
    Issue(WorkerMethod::kInfer, request, std::move(done), &Responder::Infer);
  }
  void SaveCheckpointAsync(const SaveCheckpointRequest& request, Done<SaveCheckpointResponse> done) override {
    Issue(WorkerMethod::kSaveCheckpoint, request, std::move(done), &Responder::SaveCheckpoint);
  }
  void OpenSessionAsync(const WorkerOpenSessionRequest& request, Done<OpenSessionResponse> done) override {
    Issue(WorkerMethod::kOpenSession, request, std::move(done), &Responder::OpenSession);
  }
  void RunSessionAsync(const SessionRequest& request, Done<SessionResponse> done) override {
    Issue(WorkerMethod::kRunSession, request, std::move(done), &Responder::RunSession);
  }
  void AbortJobAsync(const AbortJobRequest& request, std::function<void(absl::Status)> done) override {
    auto call = NewCall(WorkerMethod::kAbortJob, request);
    auto d = std::make_shared<std::function<void(absl::Status)>>(std::move(done));
    Responder* responder = worker_->responder_.get();
    call->respond = [responder, request, d] { (*d)(responder->AbortJob(request)); };
    call->reply = [d](const google::protobuf::Message&) { (*d)(absl::OkStatus()); };
    call->fail = [d](absl::Status status) { (*d)(std::move(status)); };
    worker_->Start(std::move(call));
  }
  void ProbeAsync(const ProbeRequest& request, absl::Duration, Done<ProbeResponse> done) override {
    Issue(WorkerMethod::kProbe, request, std::move(done), &Responder::Probe);
  }
  void LeaveGroupAsync(const LeaveGroupRequest& request, Done<LeaveGroupResponse> done) override {
    Issue(WorkerMethod::kLeaveGroup, request, std::move(done), &Responder::LeaveGroup);
  }
  void AdoptAsync(const AdoptRequest& request, Done<AdoptResponse> done) override {
    Issue(WorkerMethod::kAdopt, request, std::move(done), &Responder::Adopt);
  }
  void CancelInFlight() override { worker_->Cancel(id_); }

 private:
  template <typename Request>
  std::shared_ptr<Call> NewCall(WorkerMethod method, const Request& request) {
    auto call = std::make_shared<Call>();
    call->method = method;
    call->client_id = id_;
    call->request = std::make_shared<Request>(request);
    return call;
  }

  template <typename Request, typename Response>
  void Issue(WorkerMethod method, const Request& request, Done<Response> done,
             absl::StatusOr<Response> (Responder::*answer)(const Request&)) {
    auto call = NewCall(method, request);
    auto d = std::make_shared<Done<Response>>(std::move(done));
    Responder* responder = worker_->responder_.get();
    call->respond = [responder, answer, request, d] { (*d)((responder->*answer)(request)); };
    call->reply = [d, method](const google::protobuf::Message& m) {
      if (m.GetDescriptor() != Response::descriptor()) {
        (*d)(absl::InternalError(absl::StrCat("the test replied ", m.GetDescriptor()->full_name(), " to ",
                                              MethodName(method), ", which answers ",
                                              Response::descriptor()->full_name())));
        return;
      }
      Response response;
      response.CopyFrom(m);
      (*d)(std::move(response));
    };
    call->fail = [d](absl::Status status) { (*d)(std::move(status)); };
    worker_->Start(std::move(call));
  }

  FakeWorker* const worker_;
  const int id_;
};

// ---------------------------------------------------------------------------
// The worker.

FakeWorker::~FakeWorker() {
  std::vector<std::shared_ptr<Call>> held;
  {
    MutexLock lock(&mu_);
    held = held_;
  }
  for (const auto& call : held) {
    Complete(call, [call] { call->fail(absl::CancelledError("the fake worker is gone")); });
  }
  transport_.JoinAll();
}

std::unique_ptr<WorkerClient> FakeWorker::Connect() {
  MutexLock lock(&mu_);
  return std::make_unique<Client>(this, ++clients_);
}

void FakeWorker::Hold(WorkerMethod method) {
  MutexLock lock(&mu_);
  hold_all_.insert(method);
}

void FakeWorker::HoldCall(WorkerMethod method, int number) {
  MutexLock lock(&mu_);
  hold_numbers_[method].insert(number);
}

void FakeWorker::StopHolding(WorkerMethod method) {
  MutexLock lock(&mu_);
  hold_all_.erase(method);
  hold_numbers_.erase(method);
}

std::unique_ptr<FakeWorker::HeldCall> FakeWorker::WaitForHeld(WorkerMethod method, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (true) {
    for (const auto& call : held_) {
      if (call->method == method && !call->taken) {
        call->taken = true;
        return std::make_unique<HeldCall>(this, call);
      }
    }
    if (absl::Now() >= deadline) return nullptr;
    held_changed_.WaitWithDeadline(&mu_, deadline);
  }
}

int FakeWorker::calls(WorkerMethod method) const {
  MutexLock lock(&mu_);
  auto it = started_.find(method);
  return it == started_.end() ? 0 : it->second;
}

void FakeWorker::Start(std::shared_ptr<Call> call) {
  {
    MutexLock lock(&mu_);
    call->number = ++started_[call->method];
    auto numbers = hold_numbers_.find(call->method);
    const bool hold = hold_all_.count(call->method) > 0 ||
                      (numbers != hold_numbers_.end() && numbers->second.erase(call->number) > 0);
    if (hold) {
      held_.push_back(call);
      held_changed_.SignalAll();
      return;
    }
  }
  Complete(call, [call] { call->respond(); });
}

bool FakeWorker::Complete(const std::shared_ptr<Call>& call, std::function<void()> outcome) {
  {
    MutexLock lock(&mu_);
    if (call->completed) return false;
    call->completed = true;
    held_.erase(std::remove(held_.begin(), held_.end(), call), held_.end());
  }
  transport_.Start(std::move(outcome));
  return true;
}

void FakeWorker::Cancel(int client_id) {
  std::vector<std::shared_ptr<Call>> cancelled;
  {
    MutexLock lock(&mu_);
    for (const auto& call : held_) {
      if (call->client_id == client_id) cancelled.push_back(call);
    }
  }
  for (const auto& call : cancelled) {
    Complete(call, [call] { call->fail(absl::CancelledError("the call was cancelled")); });
  }
}

// ---------------------------------------------------------------------------
// HeldCall.

FakeWorker::HeldCall::~HeldCall() {
  auto call = call_;
  worker_->Complete(call, [call] {
    call->fail(absl::AbortedError(
        absl::StrCat("the test dropped ", MethodName(call->method), " call ", call->number, " unanswered")));
  });
}

const google::protobuf::Message& FakeWorker::HeldCall::request() const { return *call_->request; }

int FakeWorker::HeldCall::number() const { return call_->number; }

void FakeWorker::HeldCall::Respond() {
  auto call = call_;
  worker_->Complete(call, [call] { call->respond(); });
}

void FakeWorker::HeldCall::Reply(const google::protobuf::Message& response) {
  std::shared_ptr<google::protobuf::Message> copy(response.New());
  copy->CopyFrom(response);
  auto call = call_;
  worker_->Complete(call, [call, copy] { call->reply(*copy); });
}

void FakeWorker::HeldCall::Fail(const absl::Status& status) {
  auto call = call_;
  worker_->Complete(call, [call, status]() mutable { call->fail(std::move(status)); });
}

}  // namespace trainyard

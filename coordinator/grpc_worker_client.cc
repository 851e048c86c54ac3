#include "coordinator/grpc_worker_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/grpc/channel.h"
#include "common/grpc/status.h"
#include "proto/worker.grpc.pb.h"

namespace trainyard {
namespace {

// Holds the channels of destroyed clients until nothing else does, and then
// destroys them on a thread of its own. A call's context holds its
// channel; without this, a client dropped while its last call completes
// leaves the channel's last reference to that context, destroyed on a gRPC
// callback thread, and gRPC does not support destroying a channel there
// (seen: the coordinator aborting in gRPC's "ref_counted.h: assertion
// failed: prior > 0" just after the farewell calls to a job's workers).
class ChannelReaper {
 public:
  static ChannelReaper& Get() {
    static ChannelReaper* reaper = new ChannelReaper;  // never destroyed: its thread runs to the exit
    return *reaper;
  }

  void Keep(std::shared_ptr<grpc::Channel> channel) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(std::move(channel));
    if (!started_) {
      started_ = true;
      std::thread([this] { Run(); }).detach();
    }
  }

 private:
  void Run() {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::vector<std::shared_ptr<grpc::Channel>> done;
      {
        std::lock_guard<std::mutex> lock(mu_);
        // use_count() 1: no context or stub holds it, and none can take it.
        auto unused = std::partition(held_.begin(), held_.end(),
                                     [](const std::shared_ptr<grpc::Channel>& c) { return c.use_count() > 1; });
        std::move(unused, held_.end(), std::back_inserter(done));
        held_.erase(unused, held_.end());
      }
      // `done` is destroyed here, on this thread.
    }
  }

  std::mutex mu_;
  bool started_ = false;
  std::vector<std::shared_ptr<grpc::Channel>> held_;
};

class GrpcWorkerClient : public WorkerClient {
 public:
  GrpcWorkerClient(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                   const std::string& server_name)
      : address_(address) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    SetReconnectBackoff(&args);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
    channel_ = grpc::CreateCustomChannel(address, credentials, args);
    stub_ = WorkerService::NewStub(channel_);
  }
  ~GrpcWorkerClient() override {
    stub_.reset();
    ChannelReaper::Get().Keep(std::move(channel_));
  }

  void StartJobAsync(const StartJobRequest& request, Done<StartJobResponse> done) override {
    Async<StartJobRequest, StartJobResponse>(
        std::chrono::minutes(10), request, std::move(done),
        [this](grpc::ClientContext* c, const StartJobRequest* q, StartJobResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->StartJob(c, q, r, std::move(f)); });
  }
  void RunStepsAsync(const RunStepsRequest& request, Done<RunStepsResponse> done) override {
    Async<RunStepsRequest, RunStepsResponse>(
        std::chrono::hours(24 * 365), request, std::move(done),
        [this](grpc::ClientContext* c, const RunStepsRequest* q, RunStepsResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->RunSteps(c, q, r, std::move(f)); });
  }
  void RegroupAsync(const RegroupRequest& request, Done<RegroupResponse> done) override {
    Async<RegroupRequest, RegroupResponse>(
        std::chrono::minutes(10), request, std::move(done),
        [this](grpc::ClientContext* c, const RegroupRequest* q, RegroupResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->Regroup(c, q, r, std::move(f)); });
  }
  void EvaluateAsync(const EvaluateRequest& request, Done<EvaluateResponse> done) override {
    Async<EvaluateRequest, EvaluateResponse>(
        std::chrono::hours(24 * 365), request, std::move(done),
        [this](grpc::ClientContext* c, const EvaluateRequest* q, EvaluateResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->Evaluate(c, q, r, std::move(f)); });
  }
  void InferAsync(const InferRequest& request, Done<InferResponse> done) override {
    Async<InferRequest, InferResponse>(
        std::chrono::hours(24 * 365), request, std::move(done),
        [this](grpc::ClientContext* c, const InferRequest* q, InferResponse* r, std::function<void(grpc::Status)> f) {
          stub_->async()->Infer(c, q, r, std::move(f));
        });
  }
  void SaveCheckpointAsync(const SaveCheckpointRequest& request, Done<SaveCheckpointResponse> done) override {
    Async<SaveCheckpointRequest, SaveCheckpointResponse>(
        std::chrono::hours(1), request, std::move(done),
        [this](grpc::ClientContext* c, const SaveCheckpointRequest* q, SaveCheckpointResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->SaveCheckpoint(c, q, r, std::move(f)); });
  }
  void OpenSessionAsync(const WorkerOpenSessionRequest& request, Done<OpenSessionResponse> done) override {
    Async<WorkerOpenSessionRequest, OpenSessionResponse>(
        std::chrono::minutes(10), request, std::move(done),
        [this](grpc::ClientContext* c, const WorkerOpenSessionRequest* q, OpenSessionResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->OpenSession(c, q, r, std::move(f)); });
  }
  void RunSessionAsync(const SessionRequest& request, Done<SessionResponse> done) override {
    Async<SessionRequest, SessionResponse>(
        std::chrono::hours(24), request, std::move(done),
        [this](grpc::ClientContext* c, const SessionRequest* q, SessionResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->RunSession(c, q, r, std::move(f)); });
  }
  void AbortJobAsync(const AbortJobRequest& request, std::function<void(absl::Status)> done) override {
    Async<AbortJobRequest, AbortJobResponse>(
        std::chrono::seconds(10), request,
        [done = std::move(done)](absl::StatusOr<AbortJobResponse> r) { done(r.status()); },
        [this](grpc::ClientContext* c, const AbortJobRequest* q, AbortJobResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->AbortJob(c, q, r, std::move(f)); });
  }
  void ProbeAsync(const ProbeRequest& request, absl::Duration deadline, Done<ProbeResponse> done) override {
    Async<ProbeRequest, ProbeResponse>(
        absl::ToChronoMilliseconds(deadline), request, std::move(done),
        [this](grpc::ClientContext* c, const ProbeRequest* q, ProbeResponse* r, std::function<void(grpc::Status)> f) {
          stub_->async()->Probe(c, q, r, std::move(f));
        });
  }
  void LeaveGroupAsync(const LeaveGroupRequest& request, Done<LeaveGroupResponse> done) override {
    Async<LeaveGroupRequest, LeaveGroupResponse>(
        std::chrono::seconds(10), request, std::move(done),
        [this](grpc::ClientContext* c, const LeaveGroupRequest* q, LeaveGroupResponse* r,
               std::function<void(grpc::Status)> f) { stub_->async()->LeaveGroup(c, q, r, std::move(f)); });
  }
  // Waits for the chunk the old coordinator started: as long as RunSteps may.
  void AdoptAsync(const AdoptRequest& request, Done<AdoptResponse> done) override {
    Async<AdoptRequest, AdoptResponse>(
        std::chrono::hours(24), request, std::move(done),
        [this](grpc::ClientContext* c, const AdoptRequest* q, AdoptResponse* r, std::function<void(grpc::Status)> f) {
          stub_->async()->Adopt(c, q, r, std::move(f));
        });
  }
  void CancelInFlight() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
  }

 private:
  // Starts `start` (a call of the stub's callback API) with a context,
  // request and response that live until its callback, which hands the
  // outcome to `done`.
  template <typename Request, typename Response, typename Start>
  void Async(std::chrono::system_clock::duration deadline, const Request& request, Done<Response> done, Start start) {
    struct Pending {
      grpc::ClientContext ctx;
      Request request;
      Response response;
      Done<Response> done;
    };
    auto* p = new Pending;
    p->request = request;
    p->done = std::move(done);
    p->ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_.insert(&p->ctx);
    }
    start(&p->ctx, &p->request, &p->response, [this, p](grpc::Status status) {
      std::unique_ptr<Pending> owned(p);
      {
        std::lock_guard<std::mutex> lock(mu_);
        in_flight_.erase(&owned->ctx);
      }
      Done<Response> done = std::move(owned->done);
      absl::StatusOr<Response> result =
          status.ok() ? absl::StatusOr<Response>(std::move(owned->response)) : FromGrpcStatus(status);
      // The context goes before `done`, which may drop the last reference
      // to this client: nothing here touches the client after it.
      owned.reset();
      done(std::move(result));
    });
  }

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<WorkerService::Stub> stub_;
  std::mutex mu_;
  std::set<grpc::ClientContext*> in_flight_;
};

}  // namespace

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(const std::string& address,
                                                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                  const std::string& server_name) {
  return std::make_unique<GrpcWorkerClient>(address, std::move(credentials), server_name);
}

}  // namespace trainyard

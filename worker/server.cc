#include "worker/server.h"

#include <chrono>
#include <functional>

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc/channel.h"
#include "common/grpc/metrics.h"
#include "common/grpc/status.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "common/torch/device.h"
#include "proto/worker.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker/coordinator_store.h"
#include "worker/membership.h"
#include "worker/worker_core.h"
#include "worker/worker_service.h"

namespace trainyard {
namespace {

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// CoordinatorService's membership calls over gRPC, 5 s each. After a call
// that found the coordinator unreachable, the next one first tries to
// connect at once and waits up to 200 ms for it (the channel's own
// reconnect backoff would try only 200 to 500 ms after its last attempt):
// the membership's retries, 200 ms apart while a job is held, pace the
// attempts, so a restarted coordinator hears from every rank of a held job
// within about 200 ms of listening, and adopts it. Broken() tells the
// worker's loop that the connection went down (the coordinator went away)
// so that it beats at once rather than at its next heartbeat.
class GrpcCoordinatorLink : public CoordinatorLink {
 public:
  explicit GrpcCoordinatorLink(std::shared_ptr<grpc::Channel> channel)
      : channel_(std::move(channel)), stub_(CoordinatorService::NewStub(channel_)) {}
  absl::StatusOr<RegisterWorkerResponse> Register(const RegisterWorkerRequest& request) override {
    return Call<RegisterWorkerResponse>(
        [&](grpc::ClientContext* ctx, RegisterWorkerResponse* r) { return stub_->RegisterWorker(ctx, request, r); });
  }
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request) override {
    return Call<HeartbeatResponse>(
        [&](grpc::ClientContext* ctx, HeartbeatResponse* r) { return stub_->Heartbeat(ctx, request, r); });
  }
  // The channel left READY since the last answered call (once per
  // answered call).
  bool Broken() {
    if (!answered_ || channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) return false;
    answered_ = false;
    return true;
  }

 private:
  template <typename Response, typename F>
  absl::StatusOr<Response> Call(F f) {
    if (unreachable_) {
      grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
      channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    }
    Response response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const grpc::Status status = f(&ctx, &response);
    unreachable_ = status.error_code() == grpc::StatusCode::UNAVAILABLE;
    answered_ = !unreachable_;
    TY_RETURN_IF_ERROR(FromGrpcStatus(status));
    return response;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<CoordinatorService::Stub> stub_;
  bool unreachable_ = false;
  bool answered_ = false;
};

// Heartbeats until a signal arrives. A broken connection to the
// coordinator brings the next beat forward, and so does a change of the
// held job (a job torn down: the coordinator hands this worker a new job
// only once a heartbeat says it holds none).
void BeatUntilSignalled(Membership* membership, GrpcCoordinatorLink* link, const WorkerCore& core,
                        SignalWatcher* signals) {
  while (!signals->AnyReceived()) {
    // Read before the beat: a change while it runs brings another.
    const std::string held = core.job_id();
    const absl::Time next = absl::Now() + membership->Beat();
    while (!signals->AnyReceived() && absl::Now() < next && !link->Broken() && core.job_id() == held) {
      signals->Wait(std::min(absl::Milliseconds(50), next - absl::Now()));
    }
  }
}

// What this worker tells the coordinator: its host, address and device,
// and `core`'s job, attempt and step; the job is aborted when the
// coordinator forgot the worker and does not adopt the job, or stays
// unreachable for longer than the orphan timeout.
MembershipOptions MembershipOf(WorkerCore* core, const WorkerServerOptions& options, const std::string& address) {
  MembershipOptions m;
  m.coordinator = options.coordinator;
  m.host = Hostname();
  m.address = address;
  m.device = options.device;
  m.pid = static_cast<int32_t>(getpid());
  m.held_job = [core] { return core->job_id(); };
  m.step = [core] { return core->step(); };
  m.held_attempt = [core] { return core->attempt(); };
  m.orphan_timeout = options.orphan_timeout;
  m.abort = [core](const std::string& job, const std::string& reason) {
    AbortJobRequest abort;
    abort.set_job_id(job);
    abort.set_reason(reason);
    core->AbortJob(abort).IgnoreError();
  };
  return m;
}

// A preemption (Kubernetes sends SIGTERM, then SIGKILL after the grace
// period): the job's ranks stop after the current step and rank 0 writes an
// emergency checkpoint; the coordinator then tears the job down here, within
// `grace`, or the job is aborted. The server keeps serving meanwhile (the
// RunSteps reply, AbortJob). `driven` (asked every second) says whether a
// coordinator still drives the job: when none does (it is gone, or
// stopping too and leaving its jobs to the next one), nothing will tear
// the job down, and it is aborted at once.
void HandBackHeldJob(WorkerCore* core, absl::Duration grace, const std::function<bool()>& driven) {
  const std::string held = core->job_id();
  if (held.empty()) {
    spdlog::info("worker: signal received, stopping");
    return;
  }
  spdlog::warn("worker: signal received while holding job {}; stopping it with an emergency checkpoint", held);
  const absl::Time start = absl::Now();
  core->Preempt();
  const absl::Time deadline = start + grace;
  absl::Time next_check = start + absl::Seconds(1);
  bool orphaned = false;
  while (!core->job_id().empty() && absl::Now() < deadline && !orphaned) {
    absl::SleepFor(absl::Milliseconds(20));
    if (absl::Now() >= next_check) {
      orphaned = !driven();
      next_check = absl::Now() + absl::Seconds(1);
    }
  }
  if (core->job_id().empty()) {
    spdlog::info("worker: job {} handed back {:.2f} s after the signal", held,
                 absl::ToDoubleSeconds(absl::Now() - start));
    return;
  }
  if (orphaned) {
    spdlog::warn("worker: no coordinator drives job {} any more; stopping it now", held);
  } else {
    spdlog::error("worker: job {} still held after {}; stopping anyway", held, absl::FormatDuration(grace));
  }
  AbortJobRequest abort;
  abort.set_job_id(held);
  abort.set_reason("the worker is stopping");
  core->AbortJob(abort).IgnoreError();
}

}  // namespace

absl::Status ServeWorker(const WorkerServerOptions& options, std::ostream& out) {
  if (options.coordinator.empty()) return absl::InvalidArgumentError("--coordinator: required (HOST:PORT)");
  TY_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice("--device", options.device));
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: '", options.listen, "'; expected HOST:PORT"));
  }
  const std::string listen_host = options.listen.substr(0, colon);
  std::string advertise = options.advertise_host;
  if (advertise.empty()) {
    advertise = (listen_host == "0.0.0.0" || listen_host == "[::]") ? Hostname() : listen_host;
  }
  TY_RETURN_IF_ERROR(CheckListenSecurity("--listen", options.listen, options.tls, options.insecure));
  // Only the coordinator calls a worker: with a CA, it must prove it.
  TY_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> server_credentials,
                      MakeServerCredentials(options.tls, options.tls.ca_file.empty() ? ClientCertificates::kNotRequested
                                                                                     : ClientCertificates::kRequired));
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SignalWatcher> signals, SignalWatcher::Create({SIGTERM, SIGINT}));

  // Reconnects within a couple of seconds when the coordinator comes back.
  grpc::ChannelArguments args;
  SetReconnectBackoff(&args);
  TY_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> channel_credentials,
                      MakeChannelCredentials(options.tls, &args));
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.coordinator, channel_credentials, args);

  MetricsRegistry metrics;  // outlives the core and both servers
  WorkerCoreOptions core_options;
  core_options.metrics = &metrics;
  core_options.host_address = advertise;
  core_options.device = device;
  core_options.peak_flops = options.peak_flops;
  core_options.collective_timeout = options.collective_timeout;
  core_options.store_factory = [channel](const std::string& scope) { return NewCoordinatorStore(channel, scope); };
  WorkerCore core(core_options);
  WorkerServiceImpl service(&core);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, server_credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(&service);
  AddRpcMetrics(&metrics, &builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on '", options.listen, "'"));
  }
  std::unique_ptr<HttpServer> http;
  if (!options.metrics_listen.empty()) {
    TY_ASSIGN_OR_RETURN(http,
                        HttpServer::Start("--metrics-listen", options.metrics_listen,
                                          MetricsAndHealthHandler([&metrics] { return metrics.Render(); },
                                                                  [&signals] { return !signals->AnyReceived(); })));
  }
  const std::string address = absl::StrCat(advertise, ":", port);
  out << "listening on " << listen_host << ":" << port << std::endl;
  if (http) {
    out << "metrics on " << options.metrics_listen.substr(0, options.metrics_listen.rfind(':')) << ":" << http->port()
        << std::endl;
  }

  if (options.peak_flops <= 0) {
    // The matrix-product probe every job's MFU summary reads (cached per
    // process), taken before this worker is offered jobs: a replacement
    // joining a running ELASTIC job would otherwise run it while the
    // others wait for its state.
    const auto t0 = std::chrono::steady_clock::now();
    const double peak = MeasurePeakFlops(device, torch::kFloat32);
    spdlog::info("{} float32 matrix-product peak: {:.4f} TFLOP/s (measured in {:.2f} s)", device.str(), peak / 1e12,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  GrpcCoordinatorLink link(channel);
  Membership membership(&link, MembershipOf(&core, options, address));
  BeatUntilSignalled(&membership, &link, core, signals.get());
  // While it hands its job back: does a coordinator still drive it?
  HandBackHeldJob(&core, options.preemption_grace, [&membership] { return membership.StillDriven(); });
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  return absl::OkStatus();
}

}  // namespace trainyard

#include "worker/server.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/device.h"
#include "common/grpc_channel.h"
#include "common/grpc_metrics.h"
#include "common/grpc_status.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "proto/worker.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker/coordinator_store.h"
#include "worker/worker_core.h"
#include "worker/worker_service.h"

namespace trainyard {
namespace {

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
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
  auto coordinator = CoordinatorService::NewStub(channel);

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

  std::string worker_id;
  absl::Duration interval = absl::Seconds(1);
  absl::Time last_warning = absl::InfinitePast();
  while (!signals->AnyReceived()) {
    absl::Status status;
    if (worker_id.empty()) {
      RegisterWorkerRequest request;
      request.set_host(Hostname());
      request.set_address(address);
      request.set_device(options.device);
      request.set_pid(getpid());
      request.set_held_job_id(core.job_id());
      RegisterWorkerResponse response;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      status = FromGrpcStatus(coordinator->RegisterWorker(&ctx, request, &response));
      if (status.ok()) {
        worker_id = response.worker_id();
        interval = absl::Milliseconds(std::max<int64_t>(response.heartbeat_interval_ms(), 50));
        spdlog::info("registered with the coordinator at {} as {} (serving on {})", options.coordinator, worker_id,
                     address);
      }
    } else {
      HeartbeatRequest request;
      request.set_worker_id(worker_id);
      request.set_job_id(core.job_id());
      request.set_step(core.step());
      HeartbeatResponse response;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      status = FromGrpcStatus(coordinator->Heartbeat(&ctx, request, &response));
      if (status.ok() && response.reregister()) {
        // The coordinator dropped this worker (it was silent for too long,
        // or the coordinator restarted): whatever job it held is over.
        spdlog::warn("the coordinator does not know {}; registering again", worker_id);
        const std::string held = core.job_id();
        if (!held.empty()) {
          AbortJobRequest abort;
          abort.set_job_id(held);
          abort.set_reason("the coordinator dropped this worker");
          core.AbortJob(abort).IgnoreError();
        }
        worker_id.clear();
        continue;
      }
    }
    if (!status.ok() && absl::Now() - last_warning > absl::Seconds(10)) {
      spdlog::warn("coordinator {} unreachable: {}", options.coordinator, status.ToString());
      last_warning = absl::Now();
    }
    signals->Wait(interval);
  }
  // A preemption (Kubernetes sends SIGTERM, then SIGKILL after the grace
  // period): the job's ranks stop after the current step and rank 0 writes
  // an emergency checkpoint; the coordinator then tears the job down here.
  // The server keeps serving meanwhile (the RunSteps reply, AbortJob).
  const std::string held = core.job_id();
  if (!held.empty()) {
    spdlog::warn("worker: signal received while holding job {}; stopping it with an emergency checkpoint", held);
    const absl::Time start = absl::Now();
    core.Preempt();
    const absl::Time deadline = start + options.preemption_grace;
    while (!core.job_id().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (core.job_id().empty()) {
      spdlog::info("worker: job {} handed back {:.2f} s after the signal", held,
                   absl::ToDoubleSeconds(absl::Now() - start));
    } else {
      spdlog::error("worker: job {} still held after {}; stopping anyway", held,
                    absl::FormatDuration(options.preemption_grace));
      AbortJobRequest abort;
      abort.set_job_id(held);
      abort.set_reason("the worker is stopping");
      core.AbortJob(abort).IgnoreError();
    }
  } else {
    spdlog::info("worker: signal received, stopping");
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  return absl::OkStatus();
}

}  // namespace trainyard

#include "coordinator/server.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/grpc/metrics.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_worker_client.h"
#include "spdlog/spdlog.h"

namespace trainyard {

namespace {

// Checks the options (the listen address, its security, the message size)
// and creates the state directory.
absl::Status CheckOptionsAndCreateStateDir(const CoordinatorServerOptions& options) {
  const std::string& listen = options.listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: '", listen, "'; expected HOST:PORT (port 0 = any)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.coordinator.state_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir: cannot create '", options.coordinator.state_dir, "': ", ec.message()));
  }
  TY_RETURN_IF_ERROR(CheckListenSecurity("--listen", listen, options.tls, options.insecure));
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-message-bytes: ", options.max_message_bytes, "; must be >= 1024"));
  }
  return absl::OkStatus();
}

// Prints `listening on HOST:PORT` with the port served (then `metrics on
// HOST:PORT` when /metrics is served) and logs the configuration.
void AnnounceListening(const CoordinatorServerOptions& options, int port, const HttpServer* http, bool mutual,
                       const TokenAuthenticator* tokens, std::ostream& out) {
  const std::string address = absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", port);
  out << "listening on " << address << std::endl;
  if (http) {
    out << "metrics on " << options.metrics_listen.substr(0, options.metrics_listen.rfind(':')) << ":" << http->port()
        << std::endl;
  }
  spdlog::info("coordinator listening on {} (state dir {}, output root {}; {}{}{})", address,
               options.coordinator.state_dir, options.coordinator.output_root,
               options.tls.enabled() ? (mutual ? "mutual TLS with workers" : "TLS") : "plaintext",
               tokens ? absl::StrCat(", ", tokens->size(), " token(s)") : ", no token check",
               options.submit_rate > 0 ? absl::StrCat(", ", options.submit_rate, " submits/s per client") : "");
}

}  // namespace

absl::Status ServeCoordinator(const CoordinatorServerOptions& options, std::ostream& out) {
  TY_RETURN_IF_ERROR(CheckOptionsAndCreateStateDir(options));
  const std::string& listen = options.listen;
  // Clients (users) may come without a certificate; workers must bring one
  // when there is a CA to check it against.
  const bool mutual = options.tls.enabled() && !options.tls.ca_file.empty();
  TY_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> server_credentials,
      MakeServerCredentials(options.tls, mutual ? ClientCertificates::kOptional : ClientCertificates::kNotRequested));
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
  if (options.tls.enabled()) {
    TY_ASSIGN_OR_RETURN(worker_credentials, MakeChannelCredentials(options.tls, nullptr));
  }
  std::unique_ptr<TokenAuthenticator> tokens;
  if (!options.auth_tokens_file.empty()) {
    TY_ASSIGN_OR_RETURN(tokens, TokenAuthenticator::FromFile(options.auth_tokens_file));
  }
  RateLimiter submit_limiter(options.submit_rate, options.submit_burst);
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SignalWatcher> signals, SignalWatcher::Create({SIGTERM, SIGINT}));
  MetricsRegistry metrics;  // outlives the coordinator and both servers
  CoordinatorOptions coordinator_options = options.coordinator;
  coordinator_options.metrics = &metrics;
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> coordinator,
                      Coordinator::Create(coordinator_options, [&](const WorkerRecord& w) {
                        return NewGrpcWorkerClient(w.address, worker_credentials, options.tls.server_name);
                      }));
  JobServiceGuard guard;
  guard.tokens = tokens.get();
  guard.submit_limiter = &submit_limiter;
  JobServiceImpl job_service(coordinator.get(), guard);
  CoordinatorServiceImpl coordinator_service(coordinator.get(), /*require_client_certificate=*/mutual);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, server_credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(&job_service);
  builder.RegisterService(&coordinator_service);
  AddRpcMetrics(&metrics, &builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on '", listen, "'"));
  }
  std::atomic<bool> stopping{false};
  std::unique_ptr<HttpServer> http;
  if (!options.metrics_listen.empty()) {
    TY_ASSIGN_OR_RETURN(http, HttpServer::Start("--metrics-listen", options.metrics_listen,
                                                MetricsAndHealthHandler([&metrics] { return metrics.Render(); },
                                                                        [&stopping] { return !stopping.load(); })));
  }
  coordinator->Start();
  AnnounceListening(options, port, http.get(), mutual, tokens.get(), out);
  absl::optional<int> signo;
  while (!(signo = signals->Wait(absl::Seconds(1)))) {
  }
  spdlog::info("coordinator: signal {} received, stopping", *signo);
  stopping = true;
  coordinator->Shutdown();  // cancels calls in flight, so handlers return
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  spdlog::info("coordinator stopped");
  return absl::OkStatus();
}

}  // namespace trainyard

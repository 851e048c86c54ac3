#include "coordinator/server.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_worker_client.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::Status ServeCoordinator(const CoordinatorServerOptions& options, std::ostream& out) {
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
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SignalWatcher> signals, SignalWatcher::Create({SIGTERM, SIGINT}));
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> coordinator,
                      Coordinator::Create(options.coordinator, [](const WorkerRecord& w) {
                        return NewGrpcWorkerClient(w.address);
                      }));
  JobServiceImpl job_service(coordinator.get());
  CoordinatorServiceImpl coordinator_service(coordinator.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(16 << 20);
  builder.RegisterService(&job_service);
  builder.RegisterService(&coordinator_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on '", listen, "'"));
  }
  coordinator->Start();
  const std::string address = absl::StrCat(listen.substr(0, colon), ":", port);
  out << "listening on " << address << std::endl;
  spdlog::info("coordinator listening on {} (state dir {}, output root {})", address,
               options.coordinator.state_dir, options.coordinator.output_root);
  absl::optional<int> signo;
  while (!(signo = signals->Wait(absl::Seconds(1)))) {
  }
  spdlog::info("coordinator: signal {} received, stopping", *signo);
  coordinator->Shutdown();  // cancels calls in flight, so handlers return
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  spdlog::info("coordinator stopped");
  return absl::OkStatus();
}

}  // namespace trainyard

// The coordinator process: serves JobService and CoordinatorService on one
// port until SIGTERM or SIGINT, then stops cleanly (in-flight RPCs get a
// short grace period, job drivers are joined).
#ifndef TRAINYARD_COORDINATOR_SERVER_H_
#define TRAINYARD_COORDINATOR_SERVER_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "common/grpc/security.h"
#include "coordinator/coordinator.h"

namespace trainyard {

struct CoordinatorServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: chosen by the OS
  CoordinatorOptions coordinator;
  // TLS for the port; with a CA, workers must present certificates it
  // signed (CoordinatorService), and the coordinator presents its own to
  // workers (mutual TLS). Without TLS only loopback is allowed unless
  // `insecure`.
  TlsConfig tls;
  bool insecure = false;
  // `NAME TOKEN` lines: JobService calls need one of the tokens. Empty: no
  // token check.
  std::string auth_tokens_file;
  // SubmitJob calls per client and second (0: unlimited), and the burst.
  double submit_rate = 20;
  double submit_burst = 40;
  int max_message_bytes = 16 << 20;  // requests larger than this are refused
  // Prometheus text format on http://HOST:PORT/metrics (and /healthz);
  // empty: off.
  std::string metrics_listen;
};

// Prints `listening on HOST:PORT` (the real port) as the first line on
// `out`, flushed, once clients can connect. Returns when a signal asks it to
// stop; an error if it cannot start.
absl::Status ServeCoordinator(const CoordinatorServerOptions& options, std::ostream& out);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_SERVER_H_

// The worker process: serves WorkerService, registers with the coordinator,
// heartbeats (re-registering if the coordinator forgot it), and stops
// cleanly on SIGTERM or SIGINT: the job it holds stops after the current
// step with an emergency checkpoint (a preemption).
#ifndef TRAINYARD_WORKER_SERVER_H_
#define TRAINYARD_WORKER_SERVER_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/grpc/security.h"

namespace trainyard {

struct WorkerServerOptions {
  std::string coordinator;             // HOST:PORT
  std::string listen = "127.0.0.1:0";  // port 0: chosen by the OS
  // The address other processes reach this worker at (its WorkerService and
  // its collective connections); default: the listen host, or this
  // machine's hostname when listening on all interfaces.
  std::string advertise_host;
  std::string device = "cpu";
  // The device's dense peak FLOP/s for the train summary's timing/mfu; 0:
  // the device's known peak, else a matrix-product probe
  // (TrainingJobOptions::peak_flops).
  double peak_flops = 0;
  absl::Duration collective_timeout = absl::Seconds(60);
  // How long the held job outlives an unreachable coordinator
  // (MembershipOptions::orphan_timeout).
  absl::Duration orphan_timeout = absl::Minutes(5);
  // On SIGTERM, how long to wait for the job's emergency checkpoint and
  // teardown before stopping anyway (keep it under Kubernetes'
  // terminationGracePeriodSeconds).
  absl::Duration preemption_grace = absl::Seconds(25);
  // TLS for this worker's port and its channel to the coordinator; with a
  // CA, only clients with a certificate it signed (the coordinator) may
  // call WorkerService, and this worker presents its own certificate to
  // the coordinator (mutual TLS). Without TLS only loopback is allowed
  // unless `insecure`.
  TlsConfig tls;
  bool insecure = false;
  int max_message_bytes = 16 << 20;
  // Prometheus text format on http://HOST:PORT/metrics (and /healthz);
  // empty: off.
  std::string metrics_listen;
};

// Prints `listening on HOST:PORT` first on `out`, then runs until a signal.
absl::Status ServeWorker(const WorkerServerOptions& options, std::ostream& out);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SERVER_H_

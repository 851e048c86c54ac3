// The coordinator process: serves JobService and CoordinatorService on one
// port until SIGTERM or SIGINT, then stops cleanly (in-flight RPCs get a
// short grace period, job drivers are joined).
#ifndef TRAINYARD_COORDINATOR_SERVER_H_
#define TRAINYARD_COORDINATOR_SERVER_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "coordinator/coordinator.h"

namespace trainyard {

struct CoordinatorServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: chosen by the OS
  CoordinatorOptions coordinator;
};

// Prints `listening on HOST:PORT` (the real port) as the first line on
// `out`, flushed, once clients can connect. Returns when a signal asks it to
// stop; an error if it cannot start.
absl::Status ServeCoordinator(const CoordinatorServerOptions& options, std::ostream& out);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_SERVER_H_

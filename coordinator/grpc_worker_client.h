// WorkerClient over gRPC: the coordinator's channel to one worker.
// Deadlines: StartJob 10 minutes (building a large model), AbortJob 10 s;
// RunSteps and Evaluate have none, since a chunk may run for long; a worker
// that dies is noticed by the transport or by its missing heartbeats, and
// CancelInFlight ends the calls.
#ifndef TRAINYARD_COORDINATOR_GRPC_WORKER_CLIENT_H_
#define TRAINYARD_COORDINATOR_GRPC_WORKER_CLIENT_H_

#include <memory>
#include <string>

#include "coordinator/worker_client.h"

namespace trainyard {

std::unique_ptr<WorkerClient> NewGrpcWorkerClient(const std::string& address);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_GRPC_WORKER_CLIENT_H_

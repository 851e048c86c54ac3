// WorkerClient over gRPC: the coordinator's channel to one worker.
// Deadlines: StartJob and Regroup 10 minutes (building a large model,
// moving its state), SaveCheckpoint 1 hour, AbortJob 10 s; RunSteps,
// Evaluate and Infer have none in effect (a year), since a chunk may run
// for long; a worker that dies is noticed by the transport or by its
// missing heartbeats, and CancelInFlight ends the calls.
#ifndef TRAINYARD_COORDINATOR_GRPC_WORKER_CLIENT_H_
#define TRAINYARD_COORDINATOR_GRPC_WORKER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "coordinator/worker_client.h"

namespace trainyard {

// `credentials`: nullptr for plaintext; TLS credentials (common/grpc/security.h)
// verify the worker's certificate and present the coordinator's (mutual
// TLS). `server_name`: the name expected in the worker's certificate when
// it is not the address's host.
std::unique_ptr<WorkerClient> NewGrpcWorkerClient(const std::string& address,
                                                  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
                                                  const std::string& server_name = "");

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_GRPC_WORKER_CLIENT_H_

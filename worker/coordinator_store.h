// The rendezvous Store of a job, kept by the coordinator and reached over
// gRPC (CoordinatorService.Store*), so that ranks on different hosts find
// each other. Keys are scoped by `scope` (the job id and attempt). Blocking
// calls are split into RPCs of at most 30 s, so that a long wait survives
// proxies' idle timeouts; a coordinator that cannot be reached is retried
// within the caller's timeout.
#ifndef TRAINYARD_WORKER_COORDINATOR_STORE_H_
#define TRAINYARD_WORKER_COORDINATOR_STORE_H_

#include <memory>
#include <string>

#include "collective/store.h"

namespace grpc {
class Channel;
}

namespace trainyard {

std::shared_ptr<Store> NewCoordinatorStore(std::shared_ptr<grpc::Channel> channel, const std::string& scope);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COORDINATOR_STORE_H_

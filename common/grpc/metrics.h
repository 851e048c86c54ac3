// RPC metrics for a gRPC server: trainyard_rpc_requests_total{method,code}
// and trainyard_rpc_duration_seconds{method} (from the call's arrival to
// its status; a stream's whole life), recorded by a server interceptor.
#ifndef TRAINYARD_COMMON_GRPC_METRICS_H_
#define TRAINYARD_COMMON_GRPC_METRICS_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <vector>

#include "common/metrics.h"

namespace trainyard {

// Adds the interceptor to `builder` (before BuildAndStart). `registry`
// outlives the server.
void AddRpcMetrics(MetricsRegistry* registry, grpc::ServerBuilder* builder);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_METRICS_H_

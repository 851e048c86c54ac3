// Conversion between absl::Status and grpc::Status.
//
// Both use the same canonical codes (numerically identical), so the mapping is
// one to one; messages pass through unchanged. Only gRPC adapters
// (*_service.cc, *_client.cc) include this header.
#ifndef TRAINYARD_COMMON_GRPC_STATUS_H_
#define TRAINYARD_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace trainyard {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_STATUS_H_

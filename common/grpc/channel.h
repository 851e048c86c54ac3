// Channel settings every Trainyard gRPC client uses (the coordinator's
// clients of workers, a worker's client of the coordinator).
#ifndef TRAINYARD_COMMON_GRPC_CHANNEL_H_
#define TRAINYARD_COMMON_GRPC_CHANNEL_H_

#include <grpcpp/support/channel_arguments.h>

namespace trainyard {

// Reconnect within half a second when the peer comes back (gRPC's default
// backoff grows to two minutes): attempts 200 ms apart, growing to 500 ms
// (a restarted coordinator adopts a running job once every rank's worker
// has reached it again). gRPC's "minimum backoff" is its minimum connect
// timeout: each
// attempt gets 5 s for its TCP (and TLS) handshake, which a loaded or
// distant host needs.
void SetReconnectBackoff(grpc::ChannelArguments* args);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_CHANNEL_H_

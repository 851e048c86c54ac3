#include "common/grpc/channel.h"

namespace trainyard {

void SetReconnectBackoff(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args->SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args->SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
}

}  // namespace trainyard

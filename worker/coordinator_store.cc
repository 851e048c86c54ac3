#include "worker/coordinator_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "common/grpc/status.h"
#include "proto/worker.grpc.pb.h"

namespace trainyard {
namespace {

constexpr absl::Duration kMaxRpcWait = absl::Seconds(30);
constexpr absl::Duration kRpcSlack = absl::Seconds(10);  // beyond the server-side wait

class CoordinatorStore : public Store {
 public:
  CoordinatorStore(std::shared_ptr<grpc::Channel> channel, std::string scope)
      : stub_(CoordinatorService::NewStub(channel)), scope_(std::move(scope)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    StoreSetRequest request;
    request.set_scope(scope_);
    request.set_key(key);
    request.set_value(value);
    StoreSetResponse response;
    return Retry(absl::Seconds(30), [&](grpc::ClientContext* ctx) { return stub_->StoreSet(ctx, request, &response); });
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    StoreGetRequest request;
    request.set_scope(scope_);
    request.set_key(key);
    StoreGetResponse response;
    absl::Status s = WaitingCall(timeout, [&](grpc::ClientContext* ctx, int64_t wait_ms) {
      request.set_timeout_ms(wait_ms);  // the server waits for the key
      return stub_->StoreGet(ctx, request, &response);
    });
    if (!s.ok()) return s;
    return response.value();
  }

  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    StoreAddRequest request;
    request.set_scope(scope_);
    request.set_key(key);
    request.set_delta(delta);
    StoreAddResponse response;
    // Not retried: an add that reached the server must not be applied twice.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status = stub_->StoreAdd(&ctx, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response.value();
  }

  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    StoreWaitRequest request;
    request.set_scope(scope_);
    for (const std::string& k : keys) request.add_keys(k);
    StoreWaitResponse response;
    return WaitingCall(timeout, [&](grpc::ClientContext* ctx, int64_t wait_ms) {
      request.set_timeout_ms(wait_ms);
      return stub_->StoreWait(ctx, request, &response);
    });
  }

  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override {
    absl::Status s = Wait(keys, absl::ZeroDuration());
    if (s.ok()) return true;
    if (absl::IsDeadlineExceeded(s)) return false;
    return s;
  }

 private:
  // A call whose server side waits (`rpc(ctx, wait_ms)`), in pieces of at
  // most kMaxRpcWait, until it succeeds, fails for good, or `timeout`
  // passes; retried while the coordinator is unreachable.
  template <typename F>
  absl::Status WaitingCall(absl::Duration timeout, F rpc) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const absl::Duration wait = std::min(std::max(deadline - absl::Now(), absl::ZeroDuration()), kMaxRpcWait);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait + kRpcSlack));
      absl::Status s = FromGrpcStatus(rpc(&ctx, absl::ToInt64Milliseconds(wait)));
      if (s.ok() || absl::Now() >= deadline) return s;
      if (absl::IsUnavailable(s)) {
        absl::SleepFor(absl::Milliseconds(200));
      } else if (!absl::IsDeadlineExceeded(s)) {
        return s;
      }
    }
  }

  // Retries an idempotent call while the coordinator is unreachable.
  template <typename F>
  absl::Status Retry(absl::Duration budget, F call) {
    const absl::Time deadline = absl::Now() + budget;
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      absl::Status s = FromGrpcStatus(call(&ctx));
      if (!absl::IsUnavailable(s) || absl::Now() >= deadline) return s;
      absl::SleepFor(absl::Milliseconds(200));
    }
  }

  std::unique_ptr<CoordinatorService::Stub> stub_;
  std::string scope_;
};

}  // namespace

std::shared_ptr<Store> NewCoordinatorStore(std::shared_ptr<grpc::Channel> channel, const std::string& scope) {
  return std::make_shared<CoordinatorStore>(std::move(channel), scope);
}

}  // namespace trainyard

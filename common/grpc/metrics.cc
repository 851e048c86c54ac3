#include "common/grpc/metrics.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::UNKNOWN:
      return "UNKNOWN";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::ABORTED:
      return "ABORTED";
    case grpc::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::INTERNAL:
      return "INTERNAL";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "OTHER";
  }
}

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(std::string method, Counter* requests, Histogram* seconds)
      : method_(std::move(method)), requests_(requests), seconds_(seconds), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      requests_->Increment({{"method", method_}, {"code", CodeName(status.error_code())}});
      seconds_->Observe(elapsed, {{"method", method_}});
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  Counter* requests_;
  Histogram* seconds_;
  std::chrono::steady_clock::time_point start_;
};

class RpcMetricsFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsFactory(MetricsRegistry* registry)
      : requests_(registry->AddCounter("trainyard_rpc_requests_total", "RPCs answered, by method and status code.")),
        seconds_(registry->AddHistogram("trainyard_rpc_duration_seconds",
                                        "RPC time from arrival to status, by method (a stream's whole life).",
                                        MetricsRegistry::LatencyBuckets())) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    // "/trainyard.JobService/SubmitJob" -> "JobService/SubmitJob"
    std::string method = info->method() != nullptr ? info->method() : "unknown";
    const size_t dot = method.find('.');
    if (!method.empty() && method[0] == '/' && dot != std::string::npos) method = method.substr(dot + 1);
    return new RpcMetricsInterceptor(std::move(method), requests_, seconds_);
  }

 private:
  Counter* requests_;
  Histogram* seconds_;
};

}  // namespace

void AddRpcMetrics(MetricsRegistry* registry, grpc::ServerBuilder* builder) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<RpcMetricsFactory>(registry));
  builder->experimental().SetInterceptorCreators(std::move(creators));
}

}  // namespace trainyard

// gRPC adapters over a Coordinator: the public JobService and the internal
// CoordinatorService (worker registration, heartbeats, rendezvous store).
// They translate messages and Status codes and hold no state of their own.
#ifndef TRAINYARD_COORDINATOR_COORDINATOR_SERVICE_H_
#define TRAINYARD_COORDINATOR_COORDINATOR_SERVICE_H_

#include "common/grpc/security.h"
#include "common/rate_limiter.h"
#include "coordinator/coordinator.h"
#include "proto/job_service.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

namespace trainyard {

// Who may call JobService, and how often.
struct JobServiceGuard {
  // nullptr: no token check (loopback or trusted networks only).
  const TokenAuthenticator* tokens = nullptr;
  // SubmitJob per client (its token's name, else its address); nullptr:
  // unlimited. Over the limit: RESOURCE_EXHAUSTED saying when to retry.
  RateLimiter* submit_limiter = nullptr;
};

class JobServiceImpl final : public JobService::Service {
 public:
  explicit JobServiceImpl(Coordinator* coordinator, JobServiceGuard guard = {})
      : coordinator_(coordinator), guard_(guard) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const SubmitJobRequest* request, SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest* request, JobInfo* response) override;
  grpc::Status ListJobs(grpc::ServerContext*, const ListJobsRequest* request, ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext*, const CancelJobRequest* request, CancelJobResponse* response) override;
  grpc::Status CheckpointJob(grpc::ServerContext*, const CheckpointJobRequest* request,
                             CheckpointJobResponse* response) override;
  // Streams a JobEvent now and on every change until the job ends, the
  // client goes away, or the coordinator shuts down.
  grpc::Status WatchJob(grpc::ServerContext* context, const WatchJobRequest* request,
                        grpc::ServerWriter<JobEvent>* writer) override;
  grpc::Status OpenSession(grpc::ServerContext*, const OpenSessionRequest* request,
                           OpenSessionResponse* response) override;
  grpc::Status RunSession(grpc::ServerContext*, const SessionRequest* request, SessionResponse* response) override;
  grpc::Status CloseSession(grpc::ServerContext*, const CloseSessionRequest* request,
                            CloseSessionResponse* response) override;

 private:
  // UNAUTHENTICATED without a known token; sets *client (if given) to the
  // token's name, or to the caller's host when tokens are off.
  grpc::Status Admit(const grpc::ServerContext& context, std::string* client = nullptr) const;

  Coordinator* coordinator_;
  JobServiceGuard guard_;
};

class CoordinatorServiceImpl final : public CoordinatorService::Service {
 public:
  // `require_client_certificate`: every call must come with a verified
  // client certificate (mutual TLS: workers only).
  explicit CoordinatorServiceImpl(Coordinator* coordinator, bool require_client_certificate = false)
      : coordinator_(coordinator), require_client_certificate_(require_client_certificate) {}
  grpc::Status RegisterWorker(grpc::ServerContext*, const RegisterWorkerRequest* request,
                              RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* request, HeartbeatResponse* response) override;
  grpc::Status StoreSet(grpc::ServerContext*, const StoreSetRequest* request, StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext*, const StoreGetRequest* request, StoreGetResponse* response) override;
  grpc::Status StoreAdd(grpc::ServerContext*, const StoreAddRequest* request, StoreAddResponse* response) override;
  grpc::Status StoreWait(grpc::ServerContext*, const StoreWaitRequest* request, StoreWaitResponse* response) override;

 private:
  grpc::Status Admit(const grpc::ServerContext& context) const;

  Coordinator* coordinator_;
  bool require_client_certificate_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_COORDINATOR_SERVICE_H_

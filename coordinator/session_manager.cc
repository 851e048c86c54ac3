#include "coordinator/session_manager.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/fan_out.h"
#include "coordinator/rank_blame.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec_validator.h"
#include "spec/session_request.h"

namespace trainyard {
namespace {

// OK when every rank succeeded; otherwise the error of the rank to blame
// (rank_blame.h, as for jobs), naming the rank and worker.
template <typename Response>
absl::Status GroupStatus(const std::vector<absl::StatusOr<Response>>& results,
                         const std::vector<std::string>& worker_ids) {
  std::vector<absl::Status> statuses;
  for (const auto& r : results) statuses.push_back(r.status());
  const int chosen = CulpritRank(statuses);
  if (chosen < 0) return absl::OkStatus();
  const absl::Status& s = statuses[chosen];
  if (results.size() == 1) return absl::Status(s.code(), absl::StrCat("worker ", worker_ids[0], ": ", s.message()));
  return absl::Status(s.code(), absl::StrCat("rank ", chosen, " (worker ", worker_ids[chosen], "): ", s.message()));
}

}  // namespace

SessionManager::~SessionManager() { Shutdown(); }

size_t SessionManager::open_sessions() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

size_t SessionManager::closed_sessions_remembered() const {
  MutexLock lock(&mu_);
  return closed_.size();
}

void SessionManager::Tick(const std::vector<WorkerRecord>& lost) {
  closers_.Reap();
  MutexLock lock(&mu_);
  if (shut_down_) return;
  const absl::Time now = options_.clock->Now();
  std::vector<std::pair<std::string, absl::Duration>> idle;
  for (const auto& [id, session] : sessions_) {
    if (session.in_flight == 0 && now - session.last_used > session.idle_timeout) {
      idle.emplace_back(id, session.idle_timeout);
    }
  }
  for (const auto& [id, timeout] : idle) {
    CloseLocked(id, absl::StrCat("idle for more than ", absl::FormatDuration(timeout)));
  }
  for (const WorkerRecord& w : lost) {
    if (sessions_.count(w.job_id)) CloseLocked(w.job_id, absl::StrCat("its worker ", w.worker_id, " was lost"));
  }
}

void SessionManager::Shutdown() {
  {
    MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto it = sessions_.begin(); it != sessions_.end();) CloseLocked((it++)->first, "the coordinator stopped");
  }
  closers_.JoinAll();
}

absl::StatusOr<OpenSessionResponse> SessionManager::Open(const OpenSessionRequest& original) {
  ValidationOptions paths;
  paths.output_root = options_.output_root;
  TY_ASSIGN_OR_RETURN(OpenSessionRequest request, NormalizeOpenSessionRequest(original, paths));
  const int num_workers = request.num_workers();
  if (!request.job_id().empty()) {
    absl::StatusOr<std::string> latest = options_.job_checkpoint(request.job_id());
    if (!latest.ok()) return absl::Status(latest.status().code(), absl::StrCat("job_id: ", latest.status().message()));
    if (latest->empty()) {
      return absl::FailedPreconditionError(absl::StrCat("job_id: job '", request.job_id(), "' has no checkpoint yet"));
    }
    request.set_checkpoint(*latest);
  }
  std::string session_id;
  {
    MutexLock lock(&mu_);
    if (shut_down_) return absl::UnavailableError("the coordinator is shutting down");
    if (request.checkpoint().empty() && request.job_id().empty()) {
      return absl::InvalidArgumentError("checkpoint: required (or job_id)");
    }
    // A random suffix: ids never repeat across coordinator restarts.
    session_id = absl::StrCat("session-", next_session_++, ".", absl::Hex(std::random_device()() & 0xffff));
  }
  // Workers from the scheduler's queue, behind the jobs submitted before
  // this session.
  TY_ASSIGN_OR_RETURN(std::vector<std::string> worker_ids,
                      options_.acquire_workers(session_id, num_workers, absl::Seconds(request.wait_seconds())));
  Session session;
  session.id = session_id;
  session.worker_ids = worker_ids;
  session.idle_timeout = absl::Seconds(request.idle_timeout_seconds());
  {
    MutexLock lock(&mu_);
    if (shut_down_) {
      options_.workers->Release(worker_ids);
      return absl::UnavailableError("the coordinator is shutting down");
    }
    for (const std::string& id : worker_ids) {
      absl::StatusOr<WorkerRecord> record = options_.workers->Get(id);
      if (!record.ok()) {
        options_.workers->Release(worker_ids);
        return absl::UnavailableError(absl::StrCat("worker ", id, " left"));
      }
      session.clients.push_back(options_.client_factory(*record));
    }
  }
  // Every worker at once: with several, they meet in the store under the
  // session's id before loading the model.
  std::vector<absl::StatusOr<OpenSessionResponse>> opened =
      CallEveryRank<OpenSessionResponse>(num_workers, [&](int rank, WorkerClient::Done<OpenSessionResponse> done) {
        WorkerOpenSessionRequest open;
        open.set_session_id(session_id);
        *open.mutable_request() = request;
        open.set_rank(rank);
        open.set_world_size(num_workers);
        session.clients[rank]->OpenSessionAsync(open, std::move(done));
      });
  MutexLock lock(&mu_);
  if (absl::Status failed = GroupStatus(opened, worker_ids); !failed.ok()) {
    // Those that opened let go again; all return to the pool.
    sessions_[session_id] = session;
    CloseLocked(session_id, "it could not be opened");
    return absl::Status(failed.code(), absl::StrCat("opening the session: ", failed.message()));
  }
  session.last_used = options_.clock->Now();
  sessions_[session_id] = session;
  OpenSessionResponse response = *opened[0];
  response.set_worker_id(worker_ids[0]);
  for (const std::string& id : worker_ids) response.add_worker_ids(id);
  spdlog::info("session {}: opened on worker(s) {} ({}, step {})", session_id, absl::StrJoin(worker_ids, ", "),
               request.checkpoint(), response.step());
  return response;
}

absl::StatusOr<SessionResponse> SessionManager::Run(const SessionRequest& request) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  std::vector<std::string> worker_ids;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(request.session_id());
    if (it == sessions_.end()) {
      auto closed = closed_.find(request.session_id());
      return absl::NotFoundError(absl::StrCat("no session '", request.session_id(), "'",
                                              closed == closed_.end() ? "" : ": closed, " + closed->second));
    }
    it->second.in_flight++;
    clients = it->second.clients;
    worker_ids = it->second.worker_ids;
  }
  std::vector<absl::StatusOr<SessionResponse>> responses = CallEveryRank<SessionResponse>(
      static_cast<int>(clients.size()), [&](int rank, WorkerClient::Done<SessionResponse> done) {
        clients[rank]->RunSessionAsync(request, std::move(done));
      });
  MutexLock lock(&mu_);
  auto it = sessions_.find(request.session_id());
  if (it != sessions_.end()) {
    it->second.in_flight--;
    it->second.last_used = options_.clock->Now();
  }
  absl::Status status = GroupStatus(responses, worker_ids);
  if (status.ok()) return std::move(*responses[0]);
  if (clients.size() == 1) return responses[0].status();
  bool same = true;
  for (const auto& r : responses) same = same && r.status().code() == responses[0].status().code();
  if (same) return responses[0].status();  // e.g. bad examples: every rank refused them alike
  // The workers no longer agree (one failed or is gone): the group is
  // broken.
  if (it != sessions_.end()) CloseLocked(request.session_id(), absl::StrCat("a worker failed: ", status.message()));
  return absl::Status(status.code(), absl::StrCat(status.message(), "; the session is closed"));
}

absl::Status SessionManager::Close(const std::string& session_id) {
  MutexLock lock(&mu_);
  if (!sessions_.count(session_id)) return absl::NotFoundError(absl::StrCat("no session '", session_id, "'"));
  CloseLocked(session_id, "by its client");
  return absl::OkStatus();
}

void SessionManager::CloseLocked(std::string session_id, const std::string& why) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  Session session = it->second;
  sessions_.erase(it);
  // Why a session closed is kept for the most recent kClosedKept sessions:
  // a long-lived coordinator does not grow with every session it served.
  closed_[session_id] = why;
  closed_order_.push_back(session_id);
  while (closed_order_.size() > kClosedKept) {
    closed_.erase(closed_order_.front());
    closed_order_.pop_front();
  }
  options_.workers->Release(session.worker_ids);  // DRAINING until each worker says it let go
  options_.store->ErasePrefix(absl::StrCat(session_id, "/"));
  spdlog::info("session {}: closed ({})", session_id, why);
  closers_.Start([session, why] {
    AbortJobRequest abort;
    abort.set_job_id(session.id);
    abort.set_reason(absl::StrCat("the session is closed: ", why));
    const std::vector<absl::Status> closed = AbortOnEveryWorker(session.clients, abort);
    for (size_t rank = 0; rank < closed.size(); ++rank) {
      if (!closed[rank].ok()) {
        spdlog::warn("session {}: worker {} did not confirm the close: {}", session.id, session.worker_ids[rank],
                     closed[rank].ToString());
      }
    }
  });
}

}  // namespace trainyard

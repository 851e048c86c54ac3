// One call to every rank of a gang, started at once through the worker
// clients' asynchronous forms (no thread per rank: a gang of thousands
// costs the coordinator no threads), each answer recorded as it comes. The
// job driver (JobDriver::OnAllRanks, which adds stopping and the lost-worker
// rule) and the session manager both fan out through it; which rank is
// blamed for a failure is rank_blame.h's rule.
//
// Thread-safety: thread-safe; the clients' callbacks run on their threads.
#ifndef TRAINYARD_COORDINATOR_FAN_OUT_H_
#define TRAINYARD_COORDINATOR_FAN_OUT_H_

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/worker_client.h"

namespace trainyard {

template <typename Response>
class RankCalls {
 public:
  // `wake` (optional) runs when a call fails and when the last one ends
  // (not for every answer: waking a waiter for each of a thousand answers
  // would cost a thousand context switches per chunk), on the thread of the
  // answer that triggered it, holding no lock of this.
  explicit RankCalls(int world, std::function<void()> wake = nullptr)
      : state_(std::make_shared<State>(world, std::move(wake))) {}

  // Starts start(rank, done) for every rank in order, where `done` is a
  // WorkerClient::Done<Response> to hand to the client's asynchronous call.
  // Hold no lock that `wake` takes (a call that fails at once may answer
  // inside `start`).
  template <typename Start>
  void StartAll(Start start) {
    for (int r = 0; r < state_->world; ++r) {
      start(r, WorkerClient::Done<Response>(
                   [state = state_, r](absl::StatusOr<Response> result) { state->Record(r, std::move(result)); }));
    }
  }

  int world() const { return state_->world; }
  int done() const {
    MutexLock lock(&state_->mu);
    return state_->done;
  }
  bool failed() const {
    MutexLock lock(&state_->mu);
    return state_->failed;
  }
  // Per rank, in rank order: whether its call has answered.
  std::vector<bool> Answered() const {
    MutexLock lock(&state_->mu);
    std::vector<bool> out;
    for (const auto& r : state_->results) out.push_back(r.has_value());
    return out;
  }
  // Blocks until every call has ended (its answer recorded and `wake`
  // returned), or until `deadline`: false then.
  bool WaitAll(absl::Time deadline = absl::InfiniteFuture()) {
    MutexLock lock(&state_->mu);
    while (state_->finished < state_->world) {
      if (deadline == absl::InfiniteFuture()) {
        state_->ended.Wait(&state_->mu);
      } else if (state_->ended.WaitWithDeadline(&state_->mu, deadline)) {
        return state_->finished == state_->world;
      }
    }
    return true;
  }
  // Every rank's answer in rank order, moved out (kUnknown for a call still
  // running): call it once, after WaitAll. The answers then belong to the
  // caller's thread alone, whichever thread drops the last reference to the
  // calls' state.
  std::vector<absl::StatusOr<Response>> TakeResults() {
    MutexLock lock(&state_->mu);
    std::vector<absl::StatusOr<Response>> out;
    out.reserve(state_->results.size());
    for (auto& r : state_->results) {
      out.push_back(r ? *std::move(r) : absl::UnknownError("the call has not ended"));
      r.reset();
    }
    return out;
  }

 private:
  struct State {
    State(int n, std::function<void()> w) : world(n), wake(std::move(w)), results(n) {}
    void Record(int r, absl::StatusOr<Response> result) {
      bool notify;
      {
        MutexLock lock(&mu);
        const bool call_failed = !result.ok();
        failed = failed || call_failed;
        results[r] = std::move(result);
        ++done;
        notify = call_failed || done == world;
      }
      if (notify && wake) wake();
      // Counted as ended only after `wake` returned: once WaitAll returns,
      // no callback calls into its caller any more.
      MutexLock lock(&mu);
      ++finished;
      ended.SignalAll();
    }
    const int world;
    const std::function<void()> wake;
    mutable Mutex mu;
    CondVar ended;
    std::vector<std::optional<absl::StatusOr<Response>>> results ABSL_GUARDED_BY(mu);
    int done ABSL_GUARDED_BY(mu) = 0;      // answers recorded
    int finished ABSL_GUARDED_BY(mu) = 0;  // callbacks returned (WaitAll)
    bool failed ABSL_GUARDED_BY(mu) = false;
  };
  std::shared_ptr<State> state_;
};

// start(rank, done) for every rank at once, every answer awaited; the
// answers in rank order.
template <typename Response, typename Start>
std::vector<absl::StatusOr<Response>> CallEveryRank(int world, Start start) {
  RankCalls<Response> calls(world);
  calls.StartAll(std::move(start));
  calls.WaitAll();
  return calls.TakeResults();
}

// The one way the coordinator tells a gang's workers to let go of a job or
// a session: AbortJob(`abort`) on every client at once (a null client, a
// rank already gone, is skipped: OK), every answer awaited (each call has
// its client's deadline); the statuses in client order.
inline std::vector<absl::Status> AbortOnEveryWorker(const std::vector<std::shared_ptr<WorkerClient>>& clients,
                                                    const AbortJobRequest& abort) {
  std::vector<absl::StatusOr<bool>> told =
      CallEveryRank<bool>(static_cast<int>(clients.size()), [&](int rank, WorkerClient::Done<bool> done) {
        if (clients[rank] == nullptr) {
          done(true);
          return;
        }
        clients[rank]->AbortJobAsync(abort, [done = std::move(done)](absl::Status s) {
          done(s.ok() ? absl::StatusOr<bool>(true) : absl::StatusOr<bool>(s));
        });
      });
  std::vector<absl::Status> out;
  out.reserve(told.size());
  for (const absl::StatusOr<bool>& t : told) out.push_back(t.status());
  return out;
}

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_FAN_OUT_H_

// JobDriver's watchdog: while a training attempt's calls run, every rank
// is probed each period, and a group stalled on a silent or cut-off rank
// is acted on (coordinator/watchdog.h); a rank reported lost (WorkerLost)
// has its call cancelled and its peers' collective aborted.
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_driver.h"
#include "coordinator/watchdog.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec.h"

namespace trainyard {

bool JobDriver::WorkerLost(const std::string& worker_id, const std::string& reason) {
  if (!elastic()) return false;
  std::shared_ptr<WorkerClient> client;
  {
    MutexLock lock(&mu_);
    lost_[worker_id] = reason;
    auto it = member_clients_.find(worker_id);
    if (it != member_clients_.end()) client = it->second;
  }
  changed_.SignalAll();
  // Its call in flight ends now (and OnAllRanks reports the loss for it).
  if (client) client->CancelInFlight();
  return true;
}

void JobDriver::WaitOrWatch(absl::Time* next_watch, bool elastic_chunk, const std::vector<bool>& answered,
                            bool after_failure) {
  if (!IsTrainingKind(plan_.spec.kind()) || plan_.watchdog.period <= absl::ZeroDuration()) {
    changed_.Wait(&mu_);
    return;
  }
  // The period is on real time, like the scheduler's tick: the injected
  // clock (tests) times the driver's own bounded waits only.
  if (!Clock::Real()->WaitWithDeadline(&changed_, &mu_, *next_watch)) return;
  mu_.Unlock();
  const absl::Duration next_in = Watch(elastic_chunk, answered, after_failure);
  // Workers that became idle meanwhile build the job while the ranks train.
  if (elastic() && elastic_chunk && started_ && !after_failure) PrepareJoiners();
  mu_.Lock();
  *next_watch = Clock::Real()->Now() + next_in;
}

std::vector<absl::StatusOr<ProbeResponse>> JobDriver::ProbeRound(
    absl::Duration deadline, const std::vector<bool>& skip_wait,
    std::vector<absl::StatusOr<ProbeResponse>>* as_of_end) {
  const int world = static_cast<int>(clients_.size());
  struct Round {
    Mutex mu;
    CondVar answered;
    int left ABSL_GUARDED_BY(mu) = 0;  // the answers waited for
    std::vector<absl::StatusOr<ProbeResponse>> answers ABSL_GUARDED_BY(mu);
    std::vector<absl::Time> arrived ABSL_GUARDED_BY(mu);
  };
  auto round = std::make_shared<Round>();
  const auto skipped = [&skip_wait](int r) { return r < static_cast<int>(skip_wait.size()) && skip_wait[r]; };
  {
    MutexLock lock(&round->mu);
    for (int r = 0; r < world; ++r) round->left += skipped(r) ? 0 : 1;
    round->answers.assign(world, absl::DeadlineExceededError("no answer since the round before"));
    round->arrived.assign(world, absl::InfinitePast());
  }
  for (int r = 0; r < world; ++r) {
    ProbeRequest request;
    request.set_job_id(plan_.job_id);
    for (int p = 0; p < world; ++p) request.add_peers(p == r ? "" : addresses_[p]);
    request.set_connect_timeout_seconds(absl::ToDoubleSeconds(deadline) / 2);
    auto done = [round, r, waited = !skipped(r)](absl::StatusOr<ProbeResponse> answer) {
      MutexLock lock(&round->mu);
      round->answers[r] = std::move(answer);
      round->arrived[r] = Clock::Real()->Now();
      if (waited) round->left--;
      round->answered.SignalAll();
    };
    if (clients_[r]) {
      clients_[r]->ProbeAsync(request, deadline, std::move(done));
    } else {
      done(absl::UnavailableError("the worker left"));
    }
  }
  MutexLock lock(&round->mu);
  while (round->left > 0) round->answered.Wait(&round->mu);  // each call ends by its deadline
  const absl::Time end = Clock::Real()->Now();
  *as_of_end = round->answers;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<ProbeResponse>& p = (*as_of_end)[r];
    if (p.ok() && p->collective_waiting()) {
      p->set_stalled_seconds(p->stalled_seconds() + absl::ToDoubleSeconds(end - round->arrived[r]));
    }
  }
  return round->answers;
}

absl::Duration JobDriver::Watch(bool elastic_chunk, const std::vector<bool>& answered, bool after_failure) {
  const int world = static_cast<int>(clients_.size());
  const WatchdogOptions& options = plan_.watchdog;
  const bool elastic_drop = elastic() && elastic_chunk;
  const absl::Duration period = options.RoundPeriod(elastic_drop);
  // The ranks silent in the suspect round before (they missed its whole
  // deadline) are not waited for again.
  std::vector<bool> skip_wait;
  if (suspects_.generation == generation_) skip_wait = suspects_.silent;
  suspects_ = {};
  std::vector<absl::StatusOr<ProbeResponse>> as_of_end;
  const std::vector<absl::StatusOr<ProbeResponse>> answers =
      ProbeRound(options.RoundDeadline(elastic_drop), skip_wait, &as_of_end);
  if (std::vector<int> blocked =
          after_failure ? BlockedOnAnsweredRanks(answers, answered, options.stall) : std::vector<int>();
      !blocked.empty()) {
    std::vector<std::string> names;
    for (int r : blocked) names.push_back(RankName(r));
    const std::string reason = absl::StrCat(
        "the watchdog aborted the collective of ", absl::StrJoin(names, ", "), ": blocked for ",
        absl::StrFormat("%.1f", answers[blocked[0]]->stalled_seconds()), " s on ranks whose calls have ended");
    spdlog::warn("job {}: {}", plan_.job_id, reason);
    LeaveGroups(blocked, reason);
    return period;
  }
  const absl::Duration stall = elastic_drop ? options.elastic_stall : options.stall;
  const WatchdogVerdict verdict = Examine(answers, stall, answered);
  if (verdict.drop.empty()) {
    if (!Suspect(answers)) return period;
    // The next round comes once the others have been blocked long enough.
    suspects_.generation = generation_;
    for (const absl::StatusOr<ProbeResponse>& a : answers) suspects_.silent.push_back(!a.ok());
    // (At least a few milliseconds: rounds never follow each other at the
    // pace of the answers.)
    return std::clamp(UntilStalled(as_of_end, stall, answered), absl::Milliseconds(10), period);
  }
  std::vector<std::string> names;
  for (int r : verdict.drop) names.push_back(RankName(r));
  const std::string reason = absl::StrCat("the watchdog dropped ", absl::StrJoin(names, ", "), ": ", verdict.reason);
  spdlog::warn("job {}: {}", plan_.job_id, reason);
  if (!elastic_drop) {
    Stop(FAILED, reason, /*retryable=*/true);
    return period;
  }
  const std::set<int> dropped(verdict.drop.begin(), verdict.drop.end());
  {
    MutexLock lock(&mu_);
    for (int r : verdict.drop) lost_[worker_ids_[r]] = absl::StrCat("dropped by the watchdog: ", verdict.reason);
  }
  std::vector<int> others;
  for (int r = 0; r < world; ++r) {
    if (!clients_[r]) continue;
    if (dropped.count(r) > 0) {
      CutOff(r, /*for_good=*/false);
      clients_[r]->CancelInFlight();
      continue;
    }
    others.push_back(r);
  }
  LeaveGroups(others, reason);
  return period;
}

void JobDriver::AwaitSurvivors(const std::function<bool()>& all_answered,
                               const std::function<std::vector<bool>()>& answered, absl::Time* next_watch) {
  std::optional<absl::Time> left;  // when the others' collective was aborted
  bool given_up = false;
  while (!all_answered() && !stop_.has_value()) {
    if (!left && LeaveGroupsOfLostPeers(answered())) left = Clock::Real()->Now();
    if (left && !given_up) {
      // Until the grace has passed (real time, as the watchdog's).
      if (Clock::Real()->Now() - *left < kAbortGrace) {
        Clock::Real()->WaitWithDeadline(&changed_, &mu_, *left + kAbortGrace);
        continue;
      }
      GiveUpOnCalls(answered());
      given_up = true;
      continue;  // the cancelled calls may have answered while mu_ was free
    }
    WaitOrWatch(next_watch, true, answered(), /*after_failure=*/true);
  }
}

bool JobDriver::LeaveGroupsOfLostPeers(const std::vector<bool>& answered) {
  std::vector<int> waiting;
  std::vector<std::string> lost;
  for (int r = 0; r < static_cast<int>(answered.size()); ++r) {
    if (!answered[r]) {
      waiting.push_back(r);
    } else if (auto it = lost_.find(worker_ids_[r]); it != lost_.end()) {
      lost.push_back(absl::StrCat(RankName(r), " (", it->second, ")"));
    }
  }
  if (lost.empty() || waiting.empty()) return false;
  const std::string reason = absl::StrCat("lost ", absl::StrJoin(lost, "; "), ": the collective of the ",
                                          waiting.size(), " rank(s) still in their calls is aborted");
  spdlog::warn("job {}: {}", plan_.job_id, reason);
  mu_.Unlock();
  LeaveGroups(waiting, reason);
  mu_.Lock();
  return true;
}

void JobDriver::GiveUpOnCalls(const std::vector<bool>& answered) {
  std::vector<std::shared_ptr<WorkerClient>> stuck;
  for (int r = 0; r < static_cast<int>(answered.size()); ++r) {
    if (answered[r] || !clients_[r]) continue;
    const std::string reason = absl::StrCat(RankName(r), " did not end its call within ",
                                            absl::FormatDuration(kAbortGrace), " of its collective's abort");
    spdlog::warn("job {}: {}; taken as lost", plan_.job_id, reason);
    lost_[worker_ids_[r]] = reason;
    stuck.push_back(clients_[r]);
  }
  if (stuck.empty()) return;
  mu_.Unlock();
  for (const auto& c : stuck) c->CancelInFlight();
  mu_.Lock();
}

void JobDriver::LeaveGroups(const std::vector<int>& ranks, const std::string& reason) {
  for (int r : ranks) {
    if (!clients_[r]) continue;
    LeaveGroupRequest leave;
    leave.set_job_id(plan_.job_id);
    leave.set_generation(generation_);
    leave.set_reason(reason);
    std::shared_ptr<WorkerClient> c = clients_[r];
    c->LeaveGroupAsync(leave, [c](absl::StatusOr<LeaveGroupResponse>) {});
  }
}

}  // namespace trainyard

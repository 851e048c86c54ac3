// JobDriver's fault_tolerance ELASTIC part: a lost rank is dropped and the
// others regroup; idle workers join and receive the state; after a regroup
// every rank must hold the same state, bit for bit.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/job_driver.h"
#include "coordinator/rank_blame.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec.h"

namespace trainyard {

namespace {

// Ranks leave and join in whole shard groups (1 rank when replicated).
int GroupUnit(const JobSpec& spec) { return ShardGroupSize(spec, spec.num_workers()); }

// Of `keep` (ascending), the ranks whose whole shard group of `unit` is
// kept; the others are added to `dropped`.
std::vector<int> WholeGroups(const std::vector<int>& keep, int unit, std::vector<int>* dropped) {
  std::map<int, int> kept;  // per group
  for (int r : keep) kept[r / unit]++;
  std::vector<int> out;
  for (int r : keep) (kept[r / unit] == unit ? out : *dropped).push_back(r);
  return out;
}

}  // namespace

bool JobDriver::Survivors(const std::vector<absl::Status>& statuses, bool preempted, const absl::Status& failure,
                          std::vector<int>* keep, std::vector<std::string>* lost) {
  // A preemption and a loss at once: the restart handles both.
  if (preempted) return false;
  for (size_t r = 0; r < statuses.size(); ++r) {
    const absl::Status& status = statuses[r];
    if (status.ok()) {
      keep->push_back(static_cast<int>(r));
    } else if (Blame(status) == kBlameTransport) {
      lost->push_back(absl::StrCat(RankName(static_cast<int>(r)), ": ", status.message()));
    } else if (Blame(status) < kBlameOwnError) {
      keep->push_back(static_cast<int>(r));  // its collective failed with the lost peer
    } else {
      return false;  // an error of the rank's own (divergence, NaN, a bad spec, ...)
    }
  }
  if (lost->empty()) return false;
  // A shard group without one of its ranks lacks a shard: it leaves whole
  // (the other groups hold the same shards).
  std::vector<int> dropped;
  *keep = WholeGroups(*keep, GroupUnit(plan_.spec), &dropped);
  for (int r : dropped) lost->push_back(absl::StrCat(RankName(r), ": its shard group lost a rank"));
  const int min_workers = std::max(plan_.spec.fault_tolerance().min_workers(), 1);
  if (static_cast<int>(keep->size()) < min_workers) {
    spdlog::warn("job {}: {} rank(s) left of {}, fewer than fault_tolerance.min_workers {}: the attempt ends ({})",
                 plan_.job_id, keep->size(), statuses.size(), min_workers, failure.ToString());
    return false;
  }
  return true;
}

absl::StatusOr<bool> JobDriver::SurvivePreemption(const std::vector<bool>& asked, int64_t last_step,
                                                  const std::string& checkpoint,
                                                  const google::protobuf::Map<std::string, double>& metrics,
                                                  const std::string& during, const std::string& during_if_ended,
                                                  Ending* ending, int64_t* step) {
  std::vector<int> keep, dropped;
  for (int r = 0; r < static_cast<int>(asked.size()); ++r) {
    if (!asked[r]) keep.push_back(r);
  }
  // Nobody's worker was asked (the job itself was stopped): it ends.
  const bool others = elastic() && keep.size() < asked.size();
  if (others) keep = WholeGroups(keep, GroupUnit(plan_.spec), &dropped);
  const int min_workers = std::max(plan_.spec.fault_tolerance().min_workers(), 1);
  if (!others || static_cast<int>(keep.size()) < min_workers) {
    if (others) {
      spdlog::warn(
          "job {}: {} rank(s) would be left of {} after the preemption, fewer than "
          "fault_tolerance.min_workers {}: the job stops",
          plan_.job_id, keep.size(), asked.size(), min_workers);
    }
    RecordPreemption(asked, last_step, checkpoint, metrics, during_if_ended, ending);
    return false;
  }
  const std::string why = RecordStop(asked, last_step, checkpoint, metrics, during);
  // The stopping workers leave the job (FormGroup aborts it on them) and
  // exit; one that heartbeats idle meanwhile is not taken back.
  for (int r = 0; r < static_cast<int>(asked.size()); ++r) {
    if (asked[r]) CutOff(r, /*for_good=*/true);
  }
  *step = last_step;
  TY_RETURN_IF_ERROR(Regroup(keep, {}, step, why));
  return true;
}

absl::StatusOr<bool> JobDriver::SurviveLostRanks(const std::vector<absl::Status>& statuses, bool preempted,
                                                 const absl::Status& failure, const std::string& during,
                                                 int64_t* step) {
  std::vector<int> keep;
  std::vector<std::string> lost;
  if (!Survivors(statuses, preempted, failure, &keep, &lost)) return false;
  TY_RETURN_IF_ERROR(Regroup(keep, {}, step, absl::StrCat("lost ", absl::StrJoin(lost, "; "), during)));
  return true;
}

JobDriver::StartOutcome JobDriver::SurviveFailedStart(const absl::Status& failure,
                                                      const std::vector<absl::StatusOr<StartJobResponse>>& each,
                                                      std::vector<StartJobResponse>* started, std::string* note) {
  if (!elastic() || each.empty()) return StartOutcome::kFailed;
  bool preempted = false;
  std::vector<int> keep;
  std::vector<std::string> lost;
  const std::vector<absl::Status> statuses = Statuses(each, &preempted);
  if (!Survivors(statuses, preempted, failure, &keep, &lost)) return StartOutcome::kFailed;
  int ready = 0;
  for (int r : keep) ready += each[r].ok() ? 1 : 0;
  const std::string why = absl::StrCat("lost ", absl::StrJoin(lost, "; "), " during the start");
  *note = absl::StrCat(why, "; started on ", keep.size(), " of ", plan_.spec.num_workers(), " workers");
  if (ready == static_cast<int>(keep.size())) {
    // The lost rank died after the last collective of its start: the
    // others hold the started job and regroup.
    started->clear();
    for (int r : keep) started->push_back(*each[r]);
    int64_t step = started->front().start_step();
    const absl::Status regrouped = Regroup(keep, {}, &step, why);
    return regrouped.ok() && step == started->front().start_step() ? StartOutcome::kStarted : StartOutcome::kFailed;
  }
  // Some kept ranks hold a started job and some let theirs go: only a
  // restart brings them to one place.
  if (ready > 0) return StartOutcome::kFailed;
  // Nothing was trained: the others start again as a smaller group, from
  // the same checkpoint (an ELASTIC job's data position does not depend
  // on the number of ranks).
  FormGroup(keep, {}, why);
  host_->SetRanks(plan_.job_id, worker_ids_, PreparingIds());
  spdlog::warn("job {}: {}; starting again on {} of {} workers (generation {})", plan_.job_id, why, keep.size(),
               plan_.spec.num_workers(), generation_);
  return StartOutcome::kAgain;
}

absl::StatusOr<bool> JobDriver::SurviveFailedChunk(const FailedChunk& chunk, ActionsByMode& actions, Ending* ending,
                                                   int64_t* step) {
  const int64_t first = *step;
  const absl::Time failed = clock_->Now();
  bool preempted = false;
  const std::vector<absl::Status> statuses = Statuses(chunk.each, &preempted);
  TY_ASSIGN_OR_RETURN(bool survived, elastic() ? SurviveLostRanks(statuses, preempted, chunk.run, "", step) : false);
  AccountFailedChunk(first, chunk.n, survived ? *step - first : -1, absl::ToDoubleSeconds(failed - chunk.start));
  if (!survived) return chunk.run;
  if (*step != first + chunk.n) return false;  // the next chunk trains the rest
  // Every step was trained; the loss came after them, while the chunk's
  // checkpoint was written (whose answers are lost with the call).
  if (chunk.save) TY_RETURN_IF_ERROR(ServeCheckpointRequests(*step, SaveFor::kChunk));
  const JobSpec& spec = plan_.spec;
  if (spec.eval_period() <= 0 || !(AtBoundary(*step, spec.eval_period()) || chunk.last)) return false;
  TY_ASSIGN_OR_RETURN(bool ended, EvaluateRanks(*step, actions, ending));
  if (ended && ending->stopped_early && !chunk.save) {
    TY_RETURN_IF_ERROR(ServeCheckpointRequests(*step, SaveFor::kStopping));
  }
  return ended;
}

void JobDriver::PrepareJoiners() {
  const int have = static_cast<int>(clients_.size() + preparing_.size());
  const int want = plan_.spec.num_workers() - have;
  if (want <= 0) return;
  std::vector<JoiningWorker> joining =
      host_->AcquireWorkers(plan_.job_id, want, GroupUnit(plan_.spec), ExcludedJoiners());
  const int world = have + static_cast<int>(joining.size());
  for (JoiningWorker& j : joining) {
    PreparingJoiner p{std::move(j), static_cast<int>(clients_.size() + preparing_.size()), world,
                      std::make_shared<PreparingJoiner::Outcome>()};
    StartJobRequest request = StartRequest(p.rank, p.world);
    request.set_join(true);
    request.set_prepare(true);
    spdlog::info("job {}: {} builds the job ahead of joining as rank {} of {}", plan_.job_id, p.worker.description,
                 p.rank, p.world);
    p.worker.client->StartJobAsync(request, [outcome = p.outcome](absl::StatusOr<StartJobResponse> built) {
      MutexLock lock(&outcome->mu);
      outcome->status = built.status();
    });
    preparing_.push_back(std::move(p));
  }
}

std::vector<std::string> JobDriver::PreparingIds() const {
  std::vector<std::string> out;
  for (const PreparingJoiner& p : preparing_) out.push_back(p.worker.worker_id);
  return out;
}

absl::Status JobDriver::AdmitJoiners(int64_t* step) {
  PrepareJoiners();
  if (preparing_.empty()) return absl::OkStatus();
  // All join together, once each has built the job or failed (a worker
  // lost meanwhile, its heartbeats stopped, has failed).
  std::vector<absl::Status> outcomes;
  for (PreparingJoiner& p : preparing_) {
    std::optional<absl::Status> status;
    {
      MutexLock lock(&p.outcome->mu);
      status = p.outcome->status;
    }
    if (!status.has_value()) {
      MutexLock lock(&mu_);
      auto lost = lost_.find(p.worker.worker_id);
      if (lost == lost_.end()) return absl::OkStatus();  // still building: the next boundary
      status = absl::UnavailableError(lost->second);
      p.worker.client->CancelInFlight();
    }
    outcomes.push_back(*status);
  }
  std::vector<PreparingJoiner> preparing = std::move(preparing_);
  preparing_.clear();
  std::vector<JoiningWorker> ready;
  std::vector<std::string> names, failed;
  for (size_t i = 0; i < preparing.size(); ++i) {
    JoiningWorker& w = preparing[i].worker;
    if (outcomes[i].ok()) {
      names.push_back(w.description);
      ready.push_back(std::move(w));
      continue;
    }
    // Not taken again as is: a transport failure until a probe finds it
    // reaches every rank, its own error for the attempt.
    spdlog::warn("job {}: {} did not build the job ahead of joining: {}", plan_.job_id, w.description,
                 outcomes[i].ToString());
    CutOffJoiner(w.worker_id, w.description, w.client, Blame(outcomes[i]) != kBlameTransport);
    AbortJobRequest abort;
    abort.set_job_id(plan_.job_id);
    abort.set_reason(absl::StrCat("not joined: ", outcomes[i].message()));
    std::shared_ptr<WorkerClient> c = w.client;
    c->AbortJobAsync(abort, [c](absl::Status) {});
    failed.push_back(w.worker_id);
  }
  if (!failed.empty()) host_->ReleaseWorkers(plan_.job_id, failed);
  if (ready.empty()) return absl::OkStatus();
  std::vector<int> keep;
  for (int r = 0; r < static_cast<int>(clients_.size()); ++r) keep.push_back(r);
  return Regroup(keep, ready, step, absl::StrCat("joined: ", absl::StrJoin(names, "; ")));
}

namespace {

constexpr absl::Duration kFirstRejoinProbe = absl::Seconds(1);
constexpr absl::Duration kMaxRejoinBackoff = absl::Seconds(60);
constexpr absl::Duration kRejoinConnectTimeout = absl::Milliseconds(500);

}  // namespace

// A cut-off worker's reachability probe: written by its callback (a gRPC
// thread), read by the driver.
struct RejoinProbe {
  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  std::string failure ABSL_GUARDED_BY(mu);  // empty: every rank was reached
};

void JobDriver::CutOff(int rank, bool for_good) {
  CutOffJoiner(worker_ids_[rank], workers_[rank], clients_[rank], for_good);
}

void JobDriver::CutOffJoiner(const std::string& worker_id, const std::string& description,
                             const std::shared_ptr<WorkerClient>& client, bool for_good) {
  CutOffWorker& c = cut_off_[worker_id];
  const bool again = c.backoff > absl::ZeroDuration();
  c.description = description;
  c.for_good = c.for_good || for_good;
  c.cleared = false;
  c.client = client;
  c.backoff = again ? std::min(2 * c.backoff, kMaxRejoinBackoff) : kFirstRejoinProbe;
  c.next_probe = clock_->Now() + c.backoff;
  c.probe.reset();
}

std::set<std::string> JobDriver::ExcludedJoiners() {
  const absl::Time now = clock_->Now();
  std::set<std::string> out;
  for (auto& [id, c] : cut_off_) {
    if (c.cleared) continue;
    out.insert(id);
    if (c.for_good || c.client == nullptr) continue;
    if (c.probe != nullptr) {
      std::string failure;
      {
        MutexLock lock(&c.probe->mu);
        if (!c.probe->done) continue;
        failure = c.probe->failure;
      }
      c.probe.reset();
      if (failure.empty()) {
        spdlog::info("job {}: {} reaches every rank again; it may join", plan_.job_id, c.description);
        c.cleared = true;
        out.erase(id);
        continue;
      }
      c.backoff = std::min(2 * c.backoff, kMaxRejoinBackoff);
      c.next_probe = now + c.backoff;
      spdlog::info("job {}: {} is still cut off ({}); probed again in {}", plan_.job_id, c.description, failure,
                   absl::FormatDuration(c.backoff));
      continue;
    }
    if (now < c.next_probe) continue;
    ProbeRequest request;  // no job: reachability only
    for (const std::string& address : addresses_) request.add_peers(address);
    request.set_connect_timeout_seconds(absl::ToDoubleSeconds(kRejoinConnectTimeout));
    auto probe = std::make_shared<RejoinProbe>();
    c.probe = probe;
    const std::vector<std::string> ranks = workers_;
    c.client->ProbeAsync(request, 2 * kRejoinConnectTimeout, [probe, ranks](absl::StatusOr<ProbeResponse> answer) {
      std::string failure;
      if (!answer.ok()) {
        failure = answer.status().ToString();
      } else {
        std::vector<std::string> unreachable;
        for (size_t r = 0; r < ranks.size(); ++r) {
          if (static_cast<int>(r) >= answer->reachable_size() || !answer->reachable(static_cast<int>(r))) {
            unreachable.push_back(ranks[r]);
          }
        }
        if (!unreachable.empty()) failure = absl::StrCat("cannot reach ", absl::StrJoin(unreachable, ", "));
      }
      MutexLock lock(&probe->mu);
      probe->failure = std::move(failure);
      probe->done = true;
    });
  }
  return out;
}

absl::Status JobDriver::Regroup(const std::vector<int>& keep, const std::vector<JoiningWorker>& joining, int64_t* step,
                                const std::string& why) {
  const auto start = absl::Now();
  const absl::Time recovery_start = clock_->Now();  // goodput: on the driver's clock
  FormGroup(keep, joining, why);
  const int world = static_cast<int>(clients_.size());
  spdlog::warn("job {}: {}; regrouping {} rank(s) (generation {})", plan_.job_id, why, world, generation_);
  std::vector<RegroupResponse> answers;
  std::vector<absl::StatusOr<RegroupResponse>> each;
  const absl::Status met = MeetAsGroup(static_cast<int>(keep.size()), &answers, elastic() ? &each : nullptr);
  if (!met.ok()) {
    // The failed meeting is recovery too (the next Regroup times its own).
    Spent(&Goodput::recovery_seconds, &Goodput::set_recovery_seconds, recovery_start);
    return RegroupWithoutLostRanks(met, each, static_cast<int>(keep.size()), step, why);
  }
  // Every rank must now hold the same state, bit for bit (hybrid
  // sharding: the same as the ranks holding its shard in the other groups).
  const int unit = GroupUnit(plan_.spec);
  for (int r = 1; r < world; ++r) {
    const int peer = r % unit;
    if (answers[r].step() != answers[0].step() || answers[r].state_digest() != answers[peer].state_digest()) {
      return absl::InternalError(absl::StrCat("after regrouping, ", RankName(r), " holds step ", answers[r].step(),
                                              " with state digest ", absl::Hex(answers[r].state_digest()), ", ",
                                              RankName(peer), " step ", answers[peer].step(), " with ",
                                              absl::Hex(answers[peer].state_digest())));
    }
  }
  *step = answers[0].step();
  regroups_++;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  Spent(&Goodput::recovery_seconds, &Goodput::set_recovery_seconds, recovery_start);
  const int source = answers[0].source_rank();
  const std::string transfer =
      source < 0 ? "every rank held the same state"
                 : absl::StrCat("state of ", RankName(source), " sent (", answers[source].sent_bytes(), " bytes in ",
                                absl::StrFormat("%.3f", answers[source].transfer_seconds()), " s)");
  const std::string note =
      absl::StrCat(why, "; training on ", world, " of ", plan_.spec.num_workers(), " workers from step ", *step,
                   " (regroup ", regroups_, " in ", absl::StrFormat("%.3f", seconds), " s; ", transfer,
                   "; state digest ", absl::Hex(answers[0].state_digest()), ")");
  spdlog::warn("job {}: {}", plan_.job_id, note);
  host_->SetRanks(plan_.job_id, worker_ids_, PreparingIds());
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    info->set_reason(note);
    info->set_step(*step);
  });
  return absl::OkStatus();
}

void JobDriver::FormGroup(const std::vector<int>& keep, const std::vector<JoiningWorker>& joining,
                          const std::string& why) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  std::vector<std::string> workers, ids, addresses;
  for (int r : keep) {
    clients.push_back(clients_[r]);
    workers.push_back(workers_[r]);
    ids.push_back(worker_ids_[r]);
    addresses.push_back(addresses_[r]);
  }
  for (const JoiningWorker& j : joining) {
    clients.push_back(j.client);
    workers.push_back(j.description);
    ids.push_back(j.worker_id);
    addresses.push_back(j.address);
  }
  // Ranks left behind let go of the job, if they still can (a worker whose
  // link was cut, or that was taken for lost).
  AbortJobRequest abort;
  abort.set_job_id(plan_.job_id);
  abort.set_reason(absl::StrCat("dropped from the job's ranks: ", why));
  const std::set<int> kept(keep.begin(), keep.end());
  for (int r = 0; r < static_cast<int>(clients_.size()); ++r) {
    if (kept.count(r) == 0 && clients_[r]) {
      std::shared_ptr<WorkerClient> c = clients_[r];
      c->AbortJobAsync(abort, [c](absl::Status) {});
    }
  }
  {
    // A worker given up on earlier (GiveUpOnCalls; not cut off) that joins
    // again is a member like any other.
    MutexLock lock(&mu_);
    for (const JoiningWorker& j : joining) lost_.erase(j.worker_id);
  }
  SetMembers(std::move(clients), std::move(workers), std::move(ids), std::move(addresses));
  generation_++;
}

absl::Status JobDriver::RegroupWithoutLostRanks(const absl::Status& failure,
                                                const std::vector<absl::StatusOr<RegroupResponse>>& each, int kept,
                                                int64_t* step, const std::string& why) {
  if (each.empty()) return failure;
  bool preempted = false;
  const std::vector<absl::Status> statuses = Statuses(each, &preempted);
  std::vector<int> keep;
  std::vector<std::string> lost;
  if (!Survivors(statuses, preempted, failure, &keep, &lost)) return failure;
  // A lost joiner (e.g. a worker that hung while idle, still registered
  // until its heartbeats are missed) is not taken again in this attempt.
  for (int r = kept; r < static_cast<int>(statuses.size()); ++r) {
    if (Blame(statuses[r]) == kBlameTransport) CutOff(r, /*for_good=*/false);
  }
  // The ranks that were in the job meet again; joiners (whose start failed
  // and was let go) join again.
  std::vector<int> again;
  std::vector<JoiningWorker> joining;
  for (int r : keep) {
    if (r < kept) {
      again.push_back(r);
    } else {
      joining.push_back({worker_ids_[r], clients_[r], workers_[r], addresses_[r]});
    }
  }
  return Regroup(again, joining, step,
                 absl::StrCat(why, "; then lost ", absl::StrJoin(lost, "; "), " while regrouping"));
}

absl::Status JobDriver::MeetAsGroup(int kept, std::vector<RegroupResponse>* answers,
                                    std::vector<absl::StatusOr<RegroupResponse>>* each) {
  const int world = static_cast<int>(clients_.size());
  return OnAllRanks<RegroupResponse>(
      "Regroup",
      [&](int r, WorkerClient::Done<RegroupResponse> done) {
        if (r < kept) {
          RegroupRequest request;
          request.set_job_id(plan_.job_id);
          request.set_attempt(plan_.restarts);
          request.set_generation(generation_);
          request.set_rank(r);
          request.set_world_size(world);
          clients_[r]->RegroupAsync(request, std::move(done));
          return;
        }
        StartJobRequest request = StartRequest(r, world);
        request.set_join(true);
        clients_[r]->StartJobAsync(request, [done = std::move(done)](absl::StatusOr<StartJobResponse> started) {
          if (!started.ok()) return done(started.status());
          RegroupResponse answer;
          answer.set_step(started->start_step());
          answer.set_source_rank(started->joined().source_rank());
          answer.set_sent_bytes(started->joined().sent_bytes());
          answer.set_transfer_seconds(started->joined().transfer_seconds());
          answer.set_state_digest(started->joined().state_digest());
          done(std::move(answer));
        });
      },
      answers, each);
}

}  // namespace trainyard

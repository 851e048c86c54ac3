// JobDriver's take-over of a running attempt by a coordinator that
// restarted (AttemptPlan::adopt): the ranks kept their state through the
// outage, so the attempt goes on from the step they are at.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/job_driver.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::Status JobDriver::CheckAdoptedPlaces(const std::vector<AdoptResponse>& adopted, const std::vector<int>& kept,
                                           bool* regroup) const {
  const AdoptResponse& first = adopted[0];
  const int group_world = plan_.adopt_world > 0 ? plan_.adopt_world : static_cast<int>(clients_.size());
  *regroup = !plan_.adopt_lost.empty() || kept.size() < clients_.size();
  for (size_t i = 0; i < adopted.size(); ++i) {
    const int r = kept[i];
    const AdoptResponse& a = adopted[i];
    const int place = plan_.adopt_places.empty() ? r : plan_.adopt_places[r];
    const bool apart = a.step() != first.step() || a.left_group();
    *regroup = *regroup || apart;
    if (a.rank() != place || a.world_size() != group_world || a.generation() != first.generation() ||
        (apart && !elastic())) {
      // E.g. a regroup the outage cut short: the ranks are not one group.
      return absl::UnavailableError(absl::StrCat("the ranks cannot be adopted as they are: ", RankName(r), " is rank ",
                                                 a.rank(), " of ", a.world_size(), " at step ", a.step(), " (group ",
                                                 a.generation(), "), rank 0 at step ", first.step(), " (group ",
                                                 first.generation(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> JobDriver::AdoptedSurvivors(const absl::Status& failure,
                                                             const std::vector<absl::StatusOr<AdoptResponse>>& each,
                                                             std::vector<AdoptResponse>* adopted, std::string* lost) {
  if (each.empty()) return failure;  // not ELASTIC
  std::vector<absl::Status> statuses;
  for (const auto& a : each) statuses.push_back(a.status());
  std::vector<int> keep;
  std::vector<std::string> lost_ranks;
  if (!Survivors(statuses, /*preempted=*/false, failure, &keep, &lost_ranks)) return failure;
  adopted->clear();
  for (int r : keep) {
    if (!each[r].ok()) return failure;  // a survivor must have answered
    adopted->push_back(*each[r]);
  }
  *lost = absl::StrCat("lost ", absl::StrJoin(lost_ranks, "; "), " during the adoption after a coordinator restart");
  spdlog::warn("job {}: {}; adopting the other {} rank(s)", plan_.job_id, *lost, keep.size());
  return keep;
}

absl::StatusOr<int64_t> JobDriver::AdoptRanks(Ending* ending) {
  const absl::Time start = clock_->Now();
  const int world = static_cast<int>(clients_.size());
  for (const auto& c : clients_) {
    if (!c) return absl::UnavailableError("a rank's worker left before the attempt was adopted");
  }
  std::vector<AdoptResponse> adopted;
  std::vector<absl::StatusOr<AdoptResponse>> each;
  const absl::Status status = OnAllRanks<AdoptResponse>(
      "Adopt",
      [&](int r, auto done) {
        AdoptRequest request;
        request.set_job_id(plan_.job_id);
        request.set_attempt(plan_.restarts);
        clients_[r]->AdoptAsync(request, std::move(done));
      },
      &adopted, elastic() ? &each : nullptr);
  // ELASTIC: a rank lost since it registered is left out.
  std::vector<int> kept(world);
  std::iota(kept.begin(), kept.end(), 0);
  std::string lost;
  if (!status.ok()) {
    TY_ASSIGN_OR_RETURN(kept, AdoptedSurvivors(status, each, &adopted, &lost));
  }
  const AdoptResponse& first = adopted[0];
  bool regroup = false;
  TY_RETURN_IF_ERROR(CheckAdoptedPlaces(adopted, kept, &regroup));
  generation_ = first.generation();
  int64_t step = first.step();
  latest_checkpoint_ = plan_.latest_checkpoint;
  // A worker was asked to stop while no coordinator listened: the ranks
  // stopped together and rank 0 wrote the emergency checkpoint.
  if (first.last_chunk().preempted() && first.last_chunk().last_step() == step) {
    std::vector<bool> asked(world, false);
    for (size_t i = 0; i < adopted.size(); ++i) asked[kept[i]] = adopted[i].last_chunk().asked_to_stop();
    RecordPreemption(asked, step, first.last_chunk().checkpoint(), first.last_chunk().metrics(),
                     " (while the coordinator was away)", ending);
    return step;
  }
  // The chunk the ranks finished while no coordinator listened: its
  // summary, checkpoint and timings in the record, its steps productive.
  double credited = 0;
  const bool one_step =
      std::all_of(adopted.begin(), adopted.end(), [&](const AdoptResponse& a) { return a.step() == step; });
  if (lost.empty() && one_step && first.has_last_chunk() && first.last_chunk().last_step() == step &&
      step > plan_.recorded_step) {
    std::vector<RunStepsResponse> ran;
    for (const AdoptResponse& a : adopted) ran.push_back(a.last_chunk());
    const int64_t steps = step - first.last_chunk_first_step();
    credited = static_cast<double>(steps) * first.last_chunk().seconds_per_step();
    seconds_per_step_ = first.last_chunk().seconds_per_step();
    RecordChunk(step, ran, [credited](Goodput* g) { g->set_productive_seconds(g->productive_seconds() + credited); });
  }
  // The outage and the take-over are recovery, less the steps trained
  // meanwhile.
  const double seconds = plan_.adoption_seconds + absl::ToDoubleSeconds(clock_->Now() - start);
  const std::string note = absl::StrCat("adopted at step ", step, " after a coordinator restart");
  spdlog::info("job {}: {} ({} rank(s), {:.2f} s since the outage)", plan_.job_id, note, kept.size(), seconds);
  host_->ChangeState(plan_.job_id, RUNNING, note, [&](JobInfo* info) {
    info->set_step(step);
    info->set_latest_checkpoint(latest_checkpoint_);
    Goodput* g = info->mutable_goodput();
    g->set_recovery_seconds(g->recovery_seconds() + std::max(0.0, seconds - credited));
  });
  if (regroup) {
    std::vector<std::string> why;
    if (!plan_.adopt_lost.empty()) why.push_back(plan_.adopt_lost);
    if (!lost.empty()) why.push_back(lost);
    if (why.empty()) why.push_back("ranks at different steps or out of their group after the coordinator's outage");
    TY_RETURN_IF_ERROR(Regroup(kept, {}, &step, absl::StrJoin(why, "; ")));
  }
  return step;
}

}  // namespace trainyard

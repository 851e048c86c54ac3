// JobDriver's take-over of a running attempt by a coordinator that
// restarted (AttemptPlan::adopt): the ranks kept their state through the
// outage, so the attempt goes on from the step they are at.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_driver.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::Status JobDriver::CheckAdoptedPlaces(const std::vector<AdoptResponse>& adopted, bool* regroup) const {
  const int world = static_cast<int>(adopted.size());
  const AdoptResponse& first = adopted[0];
  const int group_world = plan_.adopt_world > 0 ? plan_.adopt_world : world;
  *regroup = !plan_.adopt_lost.empty();
  for (int r = 0; r < world; ++r) {
    const AdoptResponse& a = adopted[r];
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

absl::StatusOr<int64_t> JobDriver::AdoptRanks(Ending* ending) {
  const absl::Time start = clock_->Now();
  const int world = static_cast<int>(clients_.size());
  for (const auto& c : clients_) {
    if (!c) return absl::UnavailableError("a rank's worker left before the attempt was adopted");
  }
  std::vector<AdoptResponse> adopted;
  TY_RETURN_IF_ERROR(OnAllRanks<AdoptResponse>(
      "Adopt",
      [&](int r, auto done) {
        AdoptRequest request;
        request.set_job_id(plan_.job_id);
        request.set_attempt(plan_.restarts);
        clients_[r]->AdoptAsync(request, std::move(done));
      },
      &adopted));
  const AdoptResponse& first = adopted[0];
  bool regroup = false;
  TY_RETURN_IF_ERROR(CheckAdoptedPlaces(adopted, &regroup));
  generation_ = first.generation();
  int64_t step = first.step();
  latest_checkpoint_ = plan_.latest_checkpoint;
  // A worker was asked to stop while no coordinator listened: the ranks
  // stopped together and rank 0 wrote the emergency checkpoint.
  if (first.last_chunk().preempted() && first.last_chunk().last_step() == step) {
    std::vector<bool> asked;
    for (const AdoptResponse& a : adopted) asked.push_back(a.last_chunk().asked_to_stop());
    RecordPreemption(asked, step, first.last_chunk().checkpoint(), first.last_chunk().metrics(),
                     " (while the coordinator was away)", ending);
    return step;
  }
  // The chunk the ranks finished while no coordinator listened: its
  // summary, checkpoint and timings in the record, its steps productive.
  double credited = 0;
  const bool one_step =
      std::all_of(adopted.begin(), adopted.end(), [&](const AdoptResponse& a) { return a.step() == step; });
  if (one_step && first.has_last_chunk() && first.last_chunk().last_step() == step && step > plan_.recorded_step) {
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
  spdlog::info("job {}: {} ({} rank(s), {:.2f} s since the outage)", plan_.job_id, note, world, seconds);
  host_->ChangeState(plan_.job_id, RUNNING, note, [&](JobInfo* info) {
    info->set_step(step);
    info->set_latest_checkpoint(latest_checkpoint_);
    Goodput* g = info->mutable_goodput();
    g->set_recovery_seconds(g->recovery_seconds() + std::max(0.0, seconds - credited));
  });
  if (regroup) {
    std::vector<int> keep(world);
    std::iota(keep.begin(), keep.end(), 0);
    TY_RETURN_IF_ERROR(Regroup(keep, {}, &step,
                               plan_.adopt_lost.empty()
                                   ? "ranks at different steps or out of their group after the coordinator's outage"
                                   : plan_.adopt_lost));
  }
  return step;
}

}  // namespace trainyard

// JobDriver's entries in the job's record: a chunk's results, a
// preemption, an inference's metrics, and the goodput's buckets.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/goodput.h"
#include "coordinator/job_driver.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void JobDriver::Spent(double (Goodput::*get)() const, void (Goodput::*set)(double), absl::Time start) {
  const double seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  if (seconds <= 0) return;
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    Goodput* g = info->mutable_goodput();
    (g->*set)((g->*get)() + seconds);
  });
}

std::function<void(Goodput*)> JobDriver::ChunkGoodput(int64_t first_step, int64_t steps, const RunStepsResponse& rank0,
                                                      absl::Time start) {
  const double seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  auto metric = [&](const char* name) {
    auto it = rank0.metrics().find(name);
    return it == rank0.metrics().end() ? 0.0 : it->second;
  };
  const double data_wait = metric("timing/data_seconds_per_step") * static_cast<double>(steps);
  const double checkpoint = metric("timing/checkpoint_stall_seconds");
  if (steps > 0) seconds_per_step_ = seconds / static_cast<double>(steps);
  return [=](Goodput* goodput) { AccountChunk(first_step, steps, seconds, data_wait, checkpoint, goodput); };
}

void JobDriver::AccountFailedChunk(int64_t first_step, int64_t steps, int64_t kept, double seconds) {
  // The steps the survivors kept, at the last chunk's pace, are training;
  // the step in progress (if they had not trained every step) is lost; the
  // rest was the wait for the fault to be found.
  const bool partway = kept >= 0 && kept < steps;
  const double trained = kept > 0 ? std::min(seconds, static_cast<double>(kept) * seconds_per_step_) : 0.0;
  const double lost = kept < 0 ? seconds : partway ? std::min(seconds - trained, seconds_per_step_) : 0.0;
  const double detection = seconds - trained - lost;
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    Goodput* g = info->mutable_goodput();
    if (kept > 0) AccountChunk(first_step, kept, trained, 0, 0, g);
    // The steps this chunk had done that will be trained again: the one in
    // progress (ELASTIC), or as far as rank 0's heartbeats said.
    const int64_t redone = kept >= 0 ? (partway ? 1 : 0) : std::max<int64_t>(info->step() - first_step, 0);
    g->set_recomputed_steps(g->recomputed_steps() + redone);
    g->set_recomputed_seconds(g->recomputed_seconds() + lost);
    g->set_recovery_seconds(g->recovery_seconds() + detection);
  });
}

void JobDriver::RecordChunk(int64_t step, const std::vector<RunStepsResponse>& ran,
                            const std::function<void(Goodput*)>& account) {
  const int world = static_cast<int>(ran.size());
  if (!ran[0].checkpoint().empty()) latest_checkpoint_ = ran[0].checkpoint();
  std::string checkpoint_failure;
  for (int r = 0; r < world && checkpoint_failure.empty(); ++r) {
    if (!ran[r].checkpoint_failure().empty()) {
      checkpoint_failure = absl::StrCat("rank ", r, ": ", ran[r].checkpoint_failure());
    }
  }
  if (checkpoint_failure != checkpoint_failure_) {
    if (checkpoint_failure.empty()) {
      spdlog::info("job {}: checkpoints are written again ({})", plan_.job_id, latest_checkpoint_);
    } else {
      spdlog::error("job {}: a checkpoint write failed, training goes on from {}: {}", plan_.job_id,
                    latest_checkpoint_.empty() ? "no checkpoint" : latest_checkpoint_, checkpoint_failure);
    }
    checkpoint_failure_ = checkpoint_failure;
  }
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    account(info->mutable_goodput());
    info->set_checkpoint_failure(checkpoint_failure_);
    info->set_step(step);
    info->mutable_metrics()->clear();
    for (const auto& [k, v] : ran[0].metrics()) (*info->mutable_metrics())[k] = v;
    info->set_metrics_step(step);
    info->set_latest_checkpoint(latest_checkpoint_);
    for (int r = 0; r < world && r < info->ranks_size(); ++r) {
      RankInfo* rank = info->mutable_ranks(r);
      rank->set_last_step_seconds(ran[r].seconds_per_step());
      rank->set_last_compute_seconds(ran[r].compute_seconds_per_step());
      rank->set_last_collective_seconds(ran[r].collective_seconds_per_step());
    }
  });
}

void JobDriver::RecordPreemption(const std::vector<bool>& asked, int64_t last_step, const std::string& checkpoint,
                                 const google::protobuf::Map<std::string, double>& metrics, const std::string& during,
                                 Ending* ending) {
  *ending->state = PREEMPTED;
  *ending->reason = RecordStop(asked, last_step, checkpoint, metrics, during);
}

std::string JobDriver::RecordStop(const std::vector<bool>& asked, int64_t last_step, const std::string& checkpoint,
                                  const google::protobuf::Map<std::string, double>& metrics,
                                  const std::string& during) {
  // A worker was asked to stop: every rank stopped after the same step and
  // rank 0 wrote the emergency checkpoint.
  const int world = static_cast<int>(asked.size());
  int r = 0;
  while (r < world && !asked[r]) ++r;
  if (r == world) r = 0;
  if (!checkpoint.empty()) latest_checkpoint_ = checkpoint;
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    info->set_step(last_step);
    info->set_latest_checkpoint(latest_checkpoint_);
    for (const auto& [k, v] : metrics) (*info->mutable_metrics())[k] = v;
  });
  return absl::StrCat(RankName(r), " was asked to stop; emergency checkpoint at step ", last_step, during,
                      checkpoint.empty() ? "" : ": " + checkpoint);
}

int64_t JobDriver::RecordInference(int64_t step, const std::vector<InferResponse>& inferred) {
  int64_t examples = 0;
  for (const InferResponse& r : inferred) examples += r.examples();
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    info->mutable_metrics()->clear();
    for (const auto& [k, v] : inferred[0].metrics()) (*info->mutable_metrics())[k] = v;
    info->set_metrics_step(step);
    info->set_step(step);
  });
  return examples;
}

}  // namespace trainyard

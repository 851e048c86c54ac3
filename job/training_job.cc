#include "job/training_job.h"

#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/status_macros.h"
#include "job/data_ledger.h"
#include "job/job_internal.h"
#include "spdlog/spdlog.h"

namespace trainyard {

using job_internal::Raised;

TrainingJob::TrainingJob(std::unique_ptr<JobComponents> parts)
    : parts_(std::move(parts)), checkpoints_(parts_.get()), evaluator_(parts_.get(), &checkpoints_) {}

absl::StatusOr<std::unique_ptr<TrainingJob>> TrainingJob::Create(const JobSpec& spec, Collective* collective,
                                                                 TrainingJobOptions options) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<JobComponents> parts, AssembleComponents(spec, collective, std::move(options)));
  return std::unique_ptr<TrainingJob>(new TrainingJob(std::move(parts)));
}

TrainingJob::~TrainingJob() { Close(); }

void TrainingJob::Close() {
  if (closed_) return;
  closed_ = true;
  if (parts_->trainer) parts_->trainer->Close().IgnoreError();
  // A checkpoint still being written completes (or fails) first.
  if (absl::Status s = checkpoints_.Wait(); !s.ok()) {
    spdlog::error("job {}: the last checkpoint write failed: {}", id(), s.ToString());
  }
}

int64_t TrainingJob::step() const { return parts_->trainer ? parts_->trainer->step() : restored_step(); }

int64_t TrainingJob::progress() const { return parts_->trainer ? parts_->trainer->progress() : restored_step(); }

absl::StatusOr<RestoreOutcome> TrainingJob::Restore(const std::string& named) { return checkpoints_.Restore(named); }

absl::StatusOr<EvalOutcome> TrainingJob::Evaluate() { return evaluator_.Evaluate(); }

absl::StatusOr<InferOutcome> TrainingJob::Infer() { return InferSplit(*parts_, restored_step()); }

absl::StatusOr<InferOutcome> TrainingJob::InferNext(int64_t after_step) {
  if (spec().restore().mode() != RestoreConfig::ALL) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id(), ": InferNext is for restore { mode: ALL }, this job restores one checkpoint"));
  }
  return InferNextCheckpoint(parts_.get(), &checkpoints_, after_step);
}

absl::StatusOr<std::string> TrainingJob::SaveCheckpoint(bool wait) { return checkpoints_.Save(wait); }

absl::Status TrainingJob::WaitForSaves() { return checkpoints_.Wait(); }

bool TrainingJob::StatePartlyReceived() const { return parts_->receiving_state; }

uint64_t TrainingJob::StateDigest() const { return trainyard::StateDigest(*parts_); }

absl::StatusOr<RegroupOutcome> TrainingJob::Regroup(Collective* collective, bool fresh) {
  TY_ASSIGN_OR_RETURN(RegroupOutcome out, RegroupState(parts_.get(), collective, fresh));
  if (fresh) checkpoints_.set_restored_step(out.step);
  return out;
}

absl::StatusOr<TrainChunk> TrainingJob::Train(int64_t num_steps) {
  Trainer* trainer = parts_->trainer.get();
  RewindableBatches* batches = parts_->batches.get();
  if (trainer == nullptr || batches == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id(), " is an ", JobKind_Name(spec().kind()), " job: it runs Infer, not RunSteps"));
  }
  TrainChunk chunk;
  try {
    // Before this trainer's first step, not timed with the steps; takes no
    // batch.
    if (absl::Status warmed = parts_->WarmUpTrain(); !warmed.ok()) return CollectiveFailure(warmed);
    const auto start = std::chrono::steady_clock::now();
    const int64_t abandoned_before = trainer->abandoned_steps();
    const int64_t first_step = trainer->step();
    batches->ResetTaken();
    absl::StatusOr<std::map<std::string, double>> summary = trainer->Train(batches, num_steps);
    if (!summary.ok()) {
      if (!IsPreemptionError(summary.status())) {
        // ELASTIC: the ranks go on after a failure, from the last completed
        // step (Regroup), so a batch taken for a step that did not complete
        // goes back.
        if (elastic() && batches->taken() > trainer->step() - first_step) {
          TY_RETURN_IF_ERROR(batches->PutBackLast());
          spdlog::warn("job {}: step {} failed part way; its batch was put back", id(), trainer->step());
        }
        batches->ledger()->DropAfter(trainer->step());  // ELASTIC keeps the rest for the next chunk
        return CollectiveFailure(summary.status());
      }
      // Stopped between microbatches: the abandoned step's batch goes back.
      const bool abandoned = trainer->abandoned_steps() > abandoned_before;
      TY_ASSIGN_OR_RETURN(chunk.emergency_checkpoint, checkpoints_.WriteEmergency(abandoned, &chunk.emergency_seconds));
      chunk.preempted = true;
      chunk.asked_to_stop = Raised(parts_->options.preempted);
      TY_RETURN_IF_ERROR(RecordLedger());
      return chunk;
    }
    chunk.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    chunk.summary = std::move(*summary);
    chunk.compute_seconds = trainer->last_chunk_timing().compute_seconds;
    chunk.collective_seconds = trainer->last_chunk_timing().collective_seconds;
    TY_RETURN_IF_ERROR(RecordLedger());
    TY_RETURN_IF_ERROR(CheckReplicasAgree());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("step ", trainer->step(), ": ", e.what()));
  }
  return chunk;
}

absl::Status TrainingJob::RecordLedger() {
  DataLedger* ledger = parts_->batches->ledger();
  ledger->DropAfter(parts_->trainer->step());
  absl::StatusOr<std::vector<LedgerEntry>> global = ledger->TakeGlobal(parts_->collective, parts_->global_batches());
  TY_RETURN_IF_ERROR(CollectiveFailure(global.status()));
  if (rank() != 0) return absl::OkStatus();
  // The ledger is a record, not training state: a failed write (a full
  // disk) is logged and training goes on; its lines are kept for the next
  // chunk's write.
  if (absl::Status s = ledger->Write(LedgerPath(spec().output_dir()), *global); !s.ok()) {
    spdlog::warn("job {} rank 0: {} step(s) wait to be written to the data ledger: {}", id(), ledger->unwritten(),
                 s.ToString());
  }
  return absl::OkStatus();
}

absl::Status TrainingJob::CheckReplicasAgree() {
  // Every rank must hold the same parameters: compare per-parameter sums
  // (bitwise: identical tensors give identical sums). With PARAMETERS
  // sharding each rank holds only its own: nothing is replicated.
  if (world_size() == 1 || parts_->trainer->parameters_sharded()) return absl::OkStatus();
  std::vector<torch::Tensor> sums;
  for (const auto& p : parts_->model->parameters()) sums.push_back(p.detach().sum().to(torch::kDouble).reshape({1}));
  absl::StatusOr<std::optional<Disagreement>> diverged = FindDisagreement(parts_->collective, torch::cat(sums));
  TY_RETURN_IF_ERROR(CollectiveFailure(diverged.status()));
  if (!diverged->has_value()) return absl::OkStatus();
  const Disagreement& d = **diverged;
  return absl::InternalError(absl::StrCat("parameters diverged across ranks at step ", parts_->trainer->step(),
                                          ": parameter #", d.index, " sums to ", d.lowest, " .. ", d.highest));
}

}  // namespace trainyard

// A training job's checkpoints on every rank: restore (the restart's
// checkpoint, else the spec's choice; damaged ones moved aside), save
// (rank 0 writes, or every rank its shard, in the background when asked)
// and the emergency checkpoint of a stop the ranks agreed on. The one
// place a job's data position is gathered and applied.
#ifndef TRAINYARD_JOB_JOB_CHECKPOINTS_H_
#define TRAINYARD_JOB_JOB_CHECKPOINTS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job/components.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {

// What Restore restored.
struct RestoreOutcome {
  int64_t step = 0;                      // 0 from scratch
  std::string checkpoint;                // "" from scratch
  std::vector<std::string> passed_over;  // checkpoints that did not read back whole, why, and where moved
};

class JobCheckpoints {
 public:
  // `job` is not owned and outlives this.
  explicit JobCheckpoints(JobComponents* job) : job_(job) {}

  // TrainingJob::Restore.
  absl::StatusOr<RestoreOutcome> Restore(const std::string& named);
  // restore { mode: ALL }: restores the oldest good checkpoint of a step
  // above `after_step` under restore.path (else output_dir), the same on
  // every rank (the smallest step any rank found); one that is gone or
  // damaged by the time it is read is passed over and the next one taken.
  // `checkpoint` stays empty when none is left.
  absl::StatusOr<RestoreOutcome> RestoreNext(int64_t after_step);
  // TrainingJob::SaveCheckpoint.
  absl::StatusOr<std::string> Save(bool wait);
  // After the ranks stopped together: kAborted unless a rank was preempted;
  // else puts the abandoned step's batch back (`abandoned`) and writes the
  // emergency checkpoint of the current step, synchronously, its time in
  // `seconds`.
  absl::StatusOr<std::string> WriteEmergency(bool abandoned, double* seconds);
  // Waits for a background save; its status.
  absl::Status Wait() { return checkpointer_.Wait(); }

  // The restored checkpoint's step (0 from scratch; a joining ELASTIC rank:
  // the step it received).
  int64_t restored_step() const { return restored_step_; }
  void set_restored_step(int64_t step) { restored_step_ = step; }
  std::string last_written() const { return checkpointer_.last_written(); }
  double last_write_seconds() const { return checkpointer_.last_write_seconds(); }
  std::string last_failure() const { return checkpointer_.last_failure(); }

 private:
  // Applies a read checkpoint: parameters (those `hold` accepts; null:
  // all), optimizer and data positions.
  absl::Status Apply(const TrainCheckpoint& ckpt, const ParamFilter& hold);
  // RestoreNext's choice: the smallest step of the next good checkpoint
  // under `where` that any rank found (a collective); nullopt for none.
  absl::StatusOr<std::optional<NumberedCheckpoint>> AgreeOnNext(const std::string& where, int64_t after_step,
                                                                std::vector<SkippedCheckpoint>* skipped);
  // Every rank's data position, in rank order (a collective); empty without
  // task data.
  absl::StatusOr<std::vector<std::string>> GatherDataStates();
  // Rank 0's random name for this save's temporary directory, on every
  // rank (a collective).
  absl::StatusOr<std::string> SaveToken();
  // Rank 0 moves the job's own checkpoints that were passed over aside (a
  // training job saves those steps again, and a save never overwrites a
  // directory); every rank logs them. The notes for RestoreOutcome.
  std::vector<std::string> SetAsidePassedOver(const std::vector<SkippedCheckpoint>& skipped);

  JobComponents* job_;
  AsyncCheckpointer checkpointer_;  // rank 0; with a sharded optimizer every rank (its shard)
  std::string last_save_started_;   // rank 0: the directory of the last save
  int64_t restored_step_ = 0;
  std::set<std::string> reported_;  // RestoreNext's passed-over notes logged so far
};

}  // namespace trainyard

#endif  // TRAINYARD_JOB_JOB_CHECKPOINTS_H_

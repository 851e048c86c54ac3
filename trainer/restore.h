// Restoring a model (and its optimizer) from a training checkpoint as a
// RestoreConfig says (T5X's RestoreCheckpointConfig): which checkpoint
// (SPECIFIC path or step, LATEST good one, or NONE), the assignment map
// (regex renames for fine-tuning from another model), strictness.
// Used by workers (StartJob) and the interactive model.
#ifndef TRAINYARD_TRAINER_RESTORE_H_
#define TRAINYARD_TRAINER_RESTORE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/t5.h"
#include "proto/job.pb.h"
#include "trainer/optimizer.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {

// The checkpoint `restore` names, "" for none (start from scratch):
// SPECIFIC: restore.path, else output_dir/checkpoint_<restore.step>;
// LATEST: the newest good checkpoint under restore.path (else output_dir),
// each damaged one skipped with its reason in `skipped`; kDataLoss when
// every one is damaged, unless fallback_to_scratch.
absl::StatusOr<std::string> ChooseCheckpoint(const RestoreConfig& restore, const std::string& output_dir,
                                             std::vector<SkippedCheckpoint>* skipped);

// A restart's checkpoint, read: `preferred` (the job's newest, as the
// coordinator recorded it) if it reads back whole, else the newest
// checkpoint_<step> under `output_dir` that does. Each one passed over
// because it is damaged (kDataLoss: a file altered, truncated or missing) or
// incomplete (kNotFound: no manifest, or gone) is added to `skipped`.
// kNotFound when none reads back; any other error (an unreadable disk) is
// returned, not skipped: a job must not quietly go back to older state
// because storage is briefly unavailable.
// `keep_slot` and `keep_param` as for ReadTrainCheckpoint.
absl::StatusOr<TrainCheckpoint> ReadRestartCheckpoint(const std::string& preferred, const std::string& output_dir,
                                                      std::vector<SkippedCheckpoint>* skipped,
                                                      const SlotFilter& keep_slot = nullptr,
                                                      const ParamFilter& keep_param = nullptr);

// Assigns the checkpoint's parameters to `network`, renamed by the
// assignment map (the first full match wins; an empty replacement drops the
// tensor), all or nothing; with `strict` (the default) every parameter must
// be matched and every tensor used. The optimizer state is loaded too when
// the checkpoint has one, it is of the same model (dropout rates may
// differ), and nothing was renamed;
// returns whether it was (then the data positions apply as well). `hold`
// as for AssignParameters: with PARAMETERS sharding only this rank's own
// parameters are assigned (and need be in `ckpt`).
absl::StatusOr<bool> ApplyCheckpoint(const TrainCheckpoint& ckpt, const RestoreConfig& restore, T5Impl* network,
                                     Optimizer* optimizer, const ParamFilter& hold = nullptr);

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_RESTORE_H_

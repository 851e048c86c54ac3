// A T5X training run's gin configuration as a Trainyard JobSpec: what
// t5x/train.py's `train` would be called with, configurable by
// configurable, mapped onto the spec's fields:
//
//   train                           total_steps, eval_period, eval_steps,
//                                   stats_period, random_seed, model_dir, actions
//   utils.DatasetConfig (train,     task, feature lengths, batch size, pack,
//     train_eval)                   shuffle, split; eval tasks and batches
//   models.EncoderDecoderModel      z_loss, label_smoothing, loss normalisation,
//                                   decoding (beam_search, temperature_sample)
//   network.T5Config                the model's config and compute dtype
//   seqio.SentencePieceVocabulary   the vocabulary (checked against the task's)
//   adafactor.Adafactor,            the optimizer (with optax's global-norm
//     optimizers.adamw / chain      clipping in a chain)
//   trainer.Trainer                 num_microbatches, the learning-rate schedule
//                                   (utils.create_learning_rate_scheduler),
//                                   weight metrics
//   utils.CheckpointConfig          save period, dtype, keep; restore path,
//                                   mode, strict, dtype, assignment_map
//   partitioning.PjitPartitioner    num_partitions 1 (data parallelism)
//
// Arguments a configurable leaves unbound take T5X's defaults for it (not
// Trainyard's), so the spec trains what T5X would. Nothing is dropped
// silently: a binding that cannot be honoured, or that a called
// configurable has no counterpart for, is an error naming its file and
// line and why — or, with allow_unmapped, a warning in the result.
// Bindings of configurables train.py never calls are listed as notes (T5X
// ignores them too).
//
// Thread-safety: not thread-safe (reads mark the configuration's bindings).
#ifndef TRAINYARD_GIN_T5X_JOB_H_
#define TRAINYARD_GIN_T5X_JOB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gin/gin_config.h"
#include "proto/job.pb.h"

namespace trainyard {

struct GinConversionOptions {
  // Unhonourable bindings become warnings instead of errors.
  bool allow_unmapped = false;
  // Task and mixture definitions (a JobSpec's task_definitions and
  // mixture_definitions) the configuration's task name may refer to; they
  // are copied into the spec. A defined task without a vocabulary takes the
  // configuration's.
  JobSpec definitions;
  // Where T5's well-known tasks (gin/t5_tasks.h) read their TFDS datasets:
  // their definitions' tfds_data_dir ("" = the workers' TFDS_DATA_DIR,
  // else ~/tensorflow_datasets).
  std::string tfds_data_dir;
};

struct GinConversion {
  JobSpec spec;
  // The model's vocabulary (seqio.SentencePieceVocabulary's file), "" when
  // unbound. Definitions without a vocabulary take it; for any other task
  // the caller checks that the task reads this vocabulary.
  std::string vocabulary;
  // "FILE:LINE: ..." for each binding not honoured (allow_unmapped only).
  std::vector<std::string> warnings;
  // Bindings of configurables train.py never calls, and T5X settings that
  // have nothing to do in Trainyard (e.g. the Python garbage collector's
  // period), each with why.
  std::vector<std::string> notes;
};

// kInvalidArgument naming the file and line of the first binding that
// cannot be honoured (all of them with allow_unmapped: then warnings), or a
// value of the wrong type; the configuration must bind train.py's `train`.
absl::StatusOr<GinConversion> JobSpecFromGin(GinConfig* config, const GinConversionOptions& options = {});

}  // namespace trainyard

#endif  // TRAINYARD_GIN_T5X_JOB_H_

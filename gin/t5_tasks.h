// T5's well-known tasks (the names t5.data.tasks registers with seqio, which
// T5X's gin files name as MIXTURE_OR_TASK_NAME) as Trainyard task
// definitions over a local TFDS copy of their datasets: the same TFDS
// name, config and version, and the same preprocessing chain, for the tasks
// whose preprocessors Trainyard has (rekey, translate, summarize,
// span_corruption, prefix_lm):
//
//   c4_v220_span_corruption   c4/en:2.2.0, text -> span corruption
//   c4_v220_prefix_lm         c4/en:2.2.0, text -> prefix LM
//   wmt_t2t_ende_v003         wmt_t2t_translate/de-en:1.0.0, English -> German, BLEU
//   wmt14_ende_v003           wmt14_translate/de-en:1.0.0, English -> German, BLEU
//   wmt14_enfr_v003           wmt14_translate/fr-en:1.0.0, English -> French, BLEU
//   wmt15_enfr_v003           wmt15_translate/fr-en:1.0.0, English -> French, BLEU
//   wmt16_enro_v003           wmt16_translate/ro-en:1.0.0, English -> Romanian, BLEU
//   wmt19_ende_v003           wmt19_translate/de-en:1.0.0, English -> German, BLEU
//   cnn_dailymail_v002        cnn_dailymail:3.1.0, summarize, ROUGE
//
// The definitions carry no vocabulary: the converter gives them the gin
// file's (T5's tasks use the model's SentencePiece vocabulary).
#ifndef TRAINYARD_GIN_T5_TASKS_H_
#define TRAINYARD_GIN_T5_TASKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace trainyard {

// The definition of T5's task `name`, its splits as "tfds:" entries read
// under `tfds_data_dir` ("" = the workers' TFDS_DATA_DIR, else
// ~/tensorflow_datasets). kUnimplemented for T5 tasks whose preprocessors
// Trainyard does not have (GLUE, SuperGLUE, SQuAD, TriviaQA, C4's iid
// denoising and unsupervised objectives), with the reason; kNotFound for a
// name T5 does not register, listing the names above.
absl::StatusOr<TaskDefinition> T5TaskDefinition(const std::string& name, const std::string& tfds_data_dir);

// The names T5TaskDefinition defines, sorted.
std::vector<std::string> T5TaskNames();

}  // namespace trainyard

#endif  // TRAINYARD_GIN_T5_TASKS_H_

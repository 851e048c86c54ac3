// Which vocabulary tokenises for a model restored from a checkpoint: the one
// policy, used by every path that tokenises for a checkpoint (jobs of every
// kind when they restore, hence the interactive model, sessions and the
// CLI's predict, score and evaluate; `trainyard predict`'s task path).
//
// A checkpoint that carries a vocabulary (checkpoint/checkpoint_vocabulary.h)
// is read in its ids: decoding, scoring and evaluating use it, whatever
// vocabulary the task names, and training from it with another vocabulary
// is refused, since the embeddings would be read with the wrong ids. A
// checkpoint without one (older checkpoints, T5X imports, HF imports without
// a tokenizer) uses the task's.
//
// Thread-safety: a free function on files.
#ifndef TRAINYARD_DATA_VOCABULARY_CHOICE_H_
#define TRAINYARD_DATA_VOCABULARY_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"

namespace trainyard {

enum class VocabularyUse {
  // The model trains on the task's ids (TRAIN, PRETRAINING, FINETUNING
  // jobs, the interactive model): a task vocabulary other than the
  // checkpoint's is refused.
  kTrain,
  // Decoding, scoring and evaluating (EVALUATION and INFERENCE jobs,
  // `trainyard predict`): the checkpoint's vocabulary takes the task's place.
  kInfer,
};

struct VocabularyChoice {
  std::string path;  // the SentencePiece model to load
  int extra_ids = 0;
  bool from_checkpoint = false;  // `path` is the checkpoint's own copy
  bool replaces_task = false;    // kInfer: the task named another vocabulary, which gives way
};

// `checkpoint`: the checkpoint directory restored, "" for none.
// `task_vocabulary`: the SentencePiece model the task (or the caller) names,
// "" for none; `task_extra_ids`: its extra ids.
//   - The checkpoint has a vocabulary: it is chosen, with the task's extra
//     ids when a task vocabulary is named (its preprocessors' sentinels),
//     else the checkpoint's. A task vocabulary with other contents (a copy
//     counts as the same) is replaced for kInfer; for kTrain it is
//     kInvalidArgument naming both files.
//   - It has none, or there is no checkpoint: the task's vocabulary; with
//     none named, the bundled digits_to_words vocabulary.
// Errors reading the checkpoint are its (kDataLoss naming a damaged file);
// an unreadable task vocabulary is kNotFound naming it.
absl::StatusOr<VocabularyChoice> ChooseVocabulary(const std::string& checkpoint, const std::string& task_vocabulary,
                                                  int task_extra_ids, VocabularyUse use);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_VOCABULARY_CHOICE_H_

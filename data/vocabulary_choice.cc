#include "data/vocabulary_choice.h"

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "common/status_macros.h"
#include "data/bundled.h"

namespace trainyard {

absl::StatusOr<VocabularyChoice> ChooseVocabulary(const std::string& checkpoint, const std::string& task_vocabulary,
                                                  int task_extra_ids, VocabularyUse use) {
  CheckpointVocabulary carried;
  if (!checkpoint.empty()) {
    TY_ASSIGN_OR_RETURN(carried, ReadCheckpointVocabulary(checkpoint));
  }
  VocabularyChoice choice;
  if (carried.path.empty()) {
    if (task_vocabulary.empty()) {
      TY_ASSIGN_OR_RETURN(choice.path, FindBundledFile("vocab/digits_to_words.model"));
      choice.extra_ids = 0;
    } else {
      choice.path = task_vocabulary;
      choice.extra_ids = task_extra_ids;
    }
    return choice;
  }
  choice.path = carried.path;
  choice.from_checkpoint = true;
  choice.extra_ids = carried.extra_ids;
  if (task_vocabulary.empty()) return choice;
  choice.extra_ids = task_extra_ids;
  TY_ASSIGN_OR_RETURN(const std::string task_bytes, ReadVocabularyFile(task_vocabulary));
  TY_ASSIGN_OR_RETURN(const std::string checkpoint_bytes, ReadVocabularyFile(carried.path));
  if (task_bytes == checkpoint_bytes) return choice;
  if (use == VocabularyUse::kInfer) {
    choice.replaces_task = true;
    return choice;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("vocabulary: ", task_vocabulary, " is not ", carried.path,
                   ", the vocabulary of the checkpoint's model (its token ids are that vocabulary's); training from "
                   "a checkpoint keeps its vocabulary: use that file (or a copy) in place of ",
                   task_vocabulary, ", or restore a checkpoint trained with it"));
}

}  // namespace trainyard

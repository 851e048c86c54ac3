// The SentencePiece vocabulary a checkpoint carries: the one its model's
// token ids belong to, written in by whoever made the checkpoint
// (`trainyard convert --from-hf`: the Hugging Face directory's or --vocab;
// a training job or interactive model: the one it tokenised with), so that
// whoever reads the checkpoint can tokenise as the model was trained.
//
//   DIR/vocabulary.model   the SentencePiece model, byte for byte
//   DIR/metadata.json      "vocabulary": "vocabulary.model" ("" for none),
//                          "vocabulary_extra_ids": N (sentinel ids after
//                          its pieces, data/vocabulary.h)
//
// Which vocabulary a reader then uses, the checkpoint's or a task's, is
// decided in one place: ChooseVocabulary (data/vocabulary_choice.h).
//
// Thread-safety: free functions on files.
#ifndef TRAINYARD_CHECKPOINT_CHECKPOINT_VOCABULARY_H_
#define TRAINYARD_CHECKPOINT_CHECKPOINT_VOCABULARY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_dir.h"
#include "nlohmann/json.hpp"

namespace trainyard {

constexpr char kVocabularyFile[] = "vocabulary.model";

struct CheckpointVocabulary {
  std::string path;  // DIR/vocabulary.model; empty when the checkpoint has none
  int extra_ids = 0;
};

// The vocabulary of the checkpoint `dir`, its file and metadata.json
// checked against the manifest (kNotFound without one; kDataLoss naming a
// damaged file, or a metadata.json whose fields are not a file name of the
// checkpoint and a count >= 0). A checkpoint written before checkpoints
// carried vocabularies has none.
absl::StatusOr<CheckpointVocabulary> ReadCheckpointVocabulary(const std::string& dir);

// Writes `model` (a SentencePiece model's bytes; empty: none) into the
// checkpoint being written and sets metadata's "vocabulary" and
// "vocabulary_extra_ids". kInvalidArgument for extra_ids < 0.
absl::Status WriteCheckpointVocabulary(CheckpointWriter* writer, const std::string& model, int extra_ids,
                                       nlohmann::ordered_json* metadata);

// The bytes of a file (kNotFound naming it when it cannot be read): a
// vocabulary to write with WriteCheckpointVocabulary.
absl::StatusOr<std::string> ReadVocabularyFile(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_CHECKPOINT_VOCABULARY_H_

// Vocabularies (seqio's SentencePieceVocabulary): text <-> token ids with T5's
// special ids (pad 0, eos 1, unk 2) and optional sentinel "extra ids"
// (<extra_id_0> is the last id, <extra_id_1> the one before, ...), as T5's
// span corruption uses them. The model's embedding is sized to the
// vocabulary rounded up to a multiple of 128.
//
// Thread-safety: a loaded vocabulary is immutable and may be shared.
#ifndef TRAINYARD_DATA_VOCABULARY_H_
#define TRAINYARD_DATA_VOCABULARY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace trainyard {

namespace internal {
class SpmModel;
}  // namespace internal

class Vocabulary {
 public:
  static constexpr int kPadId = 0;
  static constexpr int kEosId = 1;
  static constexpr int kUnkId = 2;

  // Loads a SentencePiece model. kNotFound / kInvalidArgument naming the file;
  // kInvalidArgument if its special ids are not T5's (pad 0, eos 1, unk 2).
  static absl::StatusOr<std::unique_ptr<Vocabulary>> Load(const std::string& path, int extra_ids = 0);
  ~Vocabulary();

  // Token ids of `text` (no EOS appended).
  absl::StatusOr<std::vector<int>> Encode(const std::string& text) const;
  // Text of `ids`, stopping at the first EOS and skipping padding; sentinel
  // ids decode as "<extra_id_N>".
  absl::StatusOr<std::string> Decode(absl::Span<const int> ids) const;

  // Pieces of the SentencePiece model plus the extra ids.
  int size() const;
  // size() rounded up to a multiple of 128 (the model's vocab_size).
  int padded_size() const;
  int extra_ids() const { return extra_ids_; }
  // The id of <extra_id_n> (0 <= n < extra_ids()).
  int ExtraId(int n) const { return size() - 1 - n; }
  const std::string& path() const { return path_; }

 private:
  Vocabulary() = default;
  std::unique_ptr<internal::SpmModel> model_;
  int extra_ids_ = 0;
  std::string path_;
};

// Trains a unigram SentencePiece model with T5's special ids on text files
// (one sentence per line): writes OUT_PREFIX.model and OUT_PREFIX.vocab.
absl::Status TrainVocabulary(const std::vector<std::string>& inputs, int vocab_size, const std::string& out_prefix);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_VOCABULARY_H_

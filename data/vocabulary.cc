#include "data/vocabulary.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/internal/sentencepiece_wrapper.h"

namespace trainyard {

Vocabulary::~Vocabulary() = default;

absl::StatusOr<std::unique_ptr<Vocabulary>> Vocabulary::Load(const std::string& path, int extra_ids) {
  if (!std::ifstream(path).good()) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (extra_ids < 0) return absl::InvalidArgumentError("extra_ids must be >= 0");
  std::string error;
  const internal::SpmApi* api = internal::LoadSpmApi(&error);
  if (api == nullptr) return absl::FailedPreconditionError(error);
  std::unique_ptr<internal::SpmModel> model(api->load(path, &error));
  if (model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a SentencePiece model: ", error));
  }
  if (model->pad_id() != kPadId || model->eos_id() != kEosId || model->unk_id() != kUnkId) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": special ids are pad ", model->pad_id(), ", eos ",
                                                   model->eos_id(), ", unk ", model->unk_id(),
                                                   "; T5 models need pad 0, eos 1, unk 2"));
  }
  std::unique_ptr<Vocabulary> vocab(new Vocabulary);
  vocab->model_ = std::move(model);
  vocab->extra_ids_ = extra_ids;
  vocab->path_ = path;
  return vocab;
}

int Vocabulary::size() const { return model_->PieceSize() + extra_ids_; }

int Vocabulary::padded_size() const { return (size() + 127) / 128 * 128; }

absl::StatusOr<std::vector<int>> Vocabulary::Encode(const std::string& text) const {
  std::vector<int> ids;
  std::string error;
  if (!model_->Encode(text, &ids, &error)) return absl::InvalidArgumentError(error);
  return ids;
}

absl::StatusOr<std::string> Vocabulary::Decode(absl::Span<const int> ids) const {
  std::string text;
  std::vector<int> run;
  auto flush = [&]() -> absl::Status {
    if (run.empty()) return absl::OkStatus();
    std::string piece, error;
    if (!model_->Decode(run, &piece, &error)) return absl::InvalidArgumentError(error);
    text += piece;
    run.clear();
    return absl::OkStatus();
  };
  const int pieces = model_->PieceSize();
  for (int id : ids) {
    if (id == kEosId) break;
    if (id == kPadId) continue;
    if (id < 0 || id >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary of ", size()));
    }
    if (id >= pieces) {
      absl::Status s = flush();
      if (!s.ok()) return s;
      absl::StrAppend(&text, "<extra_id_", size() - 1 - id, ">");
      continue;
    }
    run.push_back(id);
  }
  absl::Status s = flush();
  if (!s.ok()) return s;
  return text;
}

absl::Status TrainVocabulary(const std::vector<std::string>& inputs, int vocab_size, const std::string& out_prefix) {
  if (inputs.empty()) return absl::InvalidArgumentError("no input files");
  if (vocab_size < 8) return absl::InvalidArgumentError("vocab_size must be >= 8");
  for (const std::string& input : inputs) {
    if (!std::ifstream(input).good()) return absl::NotFoundError(absl::StrCat(input, ": no such file"));
  }
  const std::string args =
      absl::StrCat("--input=", absl::StrJoin(inputs, ","), " --model_prefix=", out_prefix, " --vocab_size=", vocab_size,
                   " --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2"
                   " --bos_id=-1 --num_threads=1 --minloglevel=2");
  std::string error;
  const internal::SpmApi* api = internal::LoadSpmApi(&error);
  if (api == nullptr) return absl::FailedPreconditionError(error);
  if (!api->train(args, &error)) return absl::InvalidArgumentError(error);
  return absl::OkStatus();
}

}  // namespace trainyard

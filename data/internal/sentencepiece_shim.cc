// libtrainyard_spm.so: SentencePiece behind the std-only SpmApi (see
// sentencepiece_wrapper.h). The only file that includes SentencePiece.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "data/internal/sentencepiece_wrapper.h"

namespace trainyard {
namespace internal {
namespace {

class SpmModelImpl : public SpmModel {
 public:
  sentencepiece::SentencePieceProcessor processor;

  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const override {
    const auto status = processor.Encode(text, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const override {
    const auto status = processor.Decode(ids, text);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  int PieceSize() const override { return processor.GetPieceSize(); }
  int pad_id() const override { return processor.pad_id(); }
  int eos_id() const override { return processor.eos_id(); }
  int unk_id() const override { return processor.unk_id(); }
};

SpmModel* Load(const std::string& path, std::string* error) {
  auto model = std::make_unique<SpmModelImpl>();
  const auto status = model->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return model.release();
}

bool Train(const std::string& args, std::string* error) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

}  // namespace
}  // namespace internal
}  // namespace trainyard

extern "C" __attribute__((visibility("default"))) const trainyard::internal::SpmApi* TrainyardSpmApi() {
  static const trainyard::internal::SpmApi api = {trainyard::internal::Load, trainyard::internal::Train};
  return &api;
}

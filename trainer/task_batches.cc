#include "trainer/task_batches.h"

namespace trainyard {
namespace {

torch::Tensor Tokens(const std::vector<int32_t>& v, int64_t rows, int64_t length) {
  return torch::from_blob(const_cast<int32_t*>(v.data()), {rows, length}, torch::kInt)
      .to(torch::kLong);  // copies
}

}  // namespace

T5Batch ToT5Batch(const ConvertedBatch& b) {
  T5Batch out;
  out.encoder_input_tokens = Tokens(b.encoder_input_tokens, b.rows, b.inputs_length);
  out.decoder_input_tokens = Tokens(b.decoder_input_tokens, b.rows, b.targets_length);
  out.decoder_target_tokens = Tokens(b.decoder_target_tokens, b.rows, b.targets_length);
  out.decoder_loss_weights =
      torch::from_blob(const_cast<float*>(b.decoder_loss_weights.data()), {b.rows, b.targets_length},
                       torch::kFloat)
          .clone();
  if (b.packed()) {
    out.encoder_segment_ids = Tokens(b.encoder_segment_ids, b.rows, b.inputs_length);
    out.decoder_segment_ids = Tokens(b.decoder_segment_ids, b.rows, b.targets_length);
    out.encoder_positions = Tokens(b.encoder_positions, b.rows, b.inputs_length);
    out.decoder_positions = Tokens(b.decoder_positions, b.rows, b.targets_length);
  }
  return out;
}

absl::StatusOr<T5Batch> TaskBatchIterator::Next() {
  absl::StatusOr<ConvertedBatch> batch = it_->Next();
  if (!batch.ok()) return batch.status();
  return ToT5Batch(*batch);
}

}  // namespace trainyard

#include "trainer/task_batches.h"

namespace trainyard {
namespace {

torch::Tensor Tokens(const std::vector<int32_t>& v, int64_t rows, int64_t length) {
  return torch::from_blob(const_cast<int32_t*>(v.data()), {rows, length}, torch::kInt).to(torch::kLong);  // copies
}

}  // namespace

T5Batch ToT5Batch(const ConvertedBatch& b) {
  T5Batch out;
  out.encoder_input_tokens = Tokens(b.encoder_input_tokens, b.rows, b.inputs_length);
  out.decoder_input_tokens = Tokens(b.decoder_input_tokens, b.rows, b.targets_length);
  out.decoder_target_tokens = Tokens(b.decoder_target_tokens, b.rows, b.targets_length);
  out.decoder_loss_weights =
      torch::from_blob(const_cast<float*>(b.decoder_loss_weights.data()), {b.rows, b.targets_length}, torch::kFloat)
          .clone();
  if (b.packed()) {
    out.encoder_segment_ids = Tokens(b.encoder_segment_ids, b.rows, b.inputs_length);
    out.decoder_segment_ids = Tokens(b.decoder_segment_ids, b.rows, b.targets_length);
    out.encoder_positions = Tokens(b.encoder_positions, b.rows, b.inputs_length);
    out.decoder_positions = Tokens(b.decoder_positions, b.rows, b.targets_length);
  }
  return out;
}

T5Batch ExampleRows(const ConvertedBatch& b) { return ToT5Batch(b).Slice(0, b.examples); }

absl::StatusOr<T5Batch> TaskBatchIterator::Next() {
  absl::StatusOr<ConvertedBatch> batch = it_->Next();
  if (!batch.ok()) return batch.status();
  return Count(*batch);
}

absl::StatusOr<T5Batch> TaskBatchIterator::NextRows(int64_t first, int64_t count) {
  absl::StatusOr<ConvertedBatch> batch = it_->NextRows(first, count);
  if (!batch.ok()) return batch.status();
  return Count(*batch);
}

T5Batch TaskBatchIterator::Count(const ConvertedBatch& batch) {
  examples_ += batch.examples;
  truncated_ += batch.truncated_examples;
  input_tokens_ += batch.input_tokens;
  target_tokens_ += batch.target_tokens;
  input_slots_ += batch.rows * batch.inputs_length;
  target_slots_ += batch.rows * batch.targets_length;
  return ToT5Batch(batch);
}

std::map<std::string, double> TaskBatchIterator::TakeDataMetrics() {
  std::map<std::string, double> m;
  if (input_slots_ == 0) return m;
  m["data/examples"] = static_cast<double>(examples_);
  m["data/truncated_examples"] = static_cast<double>(truncated_);
  m["data/dropped_examples"] = static_cast<double>(it_->dropped() - dropped_reported_);
  m["non_padding_fraction/inputs"] = static_cast<double>(input_tokens_) / input_slots_;
  m["non_padding_fraction/targets"] = static_cast<double>(target_tokens_) / target_slots_;
  dropped_reported_ = it_->dropped();
  examples_ = truncated_ = input_tokens_ = target_tokens_ = input_slots_ = target_slots_ = 0;
  return m;
}

std::string DecodeRow(const Vocabulary& vocab, const torch::Tensor& row) {
  const torch::Tensor ids = row.to(torch::kInt).contiguous();
  absl::StatusOr<std::string> text = vocab.Decode(absl::MakeConstSpan(ids.data_ptr<int>(), ids.numel()));
  return text.ok() ? *text : "";
}

}  // namespace trainyard

#include "data/feature_converter.h"

#include <algorithm>

namespace trainyard {

double ConvertedBatch::target_non_padding_fraction() const {
  const double total = static_cast<double>(rows * targets_length);
  return total > 0 ? static_cast<double>(target_tokens) / total : 0.0;
}

double ConvertedBatch::input_non_padding_fraction() const {
  const double total = static_cast<double>(rows * inputs_length);
  return total > 0 ? static_cast<double>(input_tokens) / total : 0.0;
}

FeatureConverter::FeatureConverter(int64_t inputs_length, int64_t targets_length, bool pack)
    : inputs_length_(inputs_length), targets_length_(targets_length), pack_(pack) {}

ConvertedBatch FeatureConverter::Convert(const std::vector<TokenizedExample>& examples) const {
  size_t consumed = 0;
  // Enough rows for any packing: at most one row per example.
  ConvertedBatch batch = ConvertToRows(examples, static_cast<int64_t>(examples.size()), &consumed);
  if (pack_) {
    // Drop the rows packing did not need.
    int64_t used = 0;
    for (int64_t r = 0; r < batch.rows; ++r) {
      if (batch.encoder_segment_ids[r * inputs_length_] != 0 || batch.decoder_segment_ids[r * targets_length_] != 0) {
        used = r + 1;
      }
    }
    auto shrink = [](auto* v, int64_t n) { v->resize(static_cast<size_t>(n)); };
    shrink(&batch.encoder_input_tokens, used * inputs_length_);
    shrink(&batch.encoder_segment_ids, used * inputs_length_);
    shrink(&batch.encoder_positions, used * inputs_length_);
    shrink(&batch.decoder_input_tokens, used * targets_length_);
    shrink(&batch.decoder_target_tokens, used * targets_length_);
    shrink(&batch.decoder_loss_weights, used * targets_length_);
    shrink(&batch.decoder_segment_ids, used * targets_length_);
    shrink(&batch.decoder_positions, used * targets_length_);
    batch.rows = used;
  }
  return batch;
}

ConvertedBatch FeatureConverter::ConvertToRows(const std::vector<TokenizedExample>& examples, int64_t rows,
                                               size_t* consumed) const {
  ConvertedBatch b;
  b.rows = rows;
  b.inputs_length = inputs_length_;
  b.targets_length = targets_length_;
  const size_t in_size = static_cast<size_t>(rows * inputs_length_);
  const size_t tg_size = static_cast<size_t>(rows * targets_length_);
  b.encoder_input_tokens.assign(in_size, 0);
  b.decoder_input_tokens.assign(tg_size, 0);
  b.decoder_target_tokens.assign(tg_size, 0);
  b.decoder_loss_weights.assign(tg_size, 0.0f);
  if (pack_) {
    b.encoder_segment_ids.assign(in_size, 0);
    b.decoder_segment_ids.assign(tg_size, 0);
    b.encoder_positions.assign(in_size, 0);
    b.decoder_positions.assign(tg_size, 0);
  }
  int64_t row = 0, in_used = 0, tg_used = 0;
  int32_t segment = 0;
  size_t i = 0;
  for (; i < examples.size(); ++i) {
    const TokenizedExample& ex = examples[i];
    const int64_t in_len = std::min<int64_t>(static_cast<int64_t>(ex.inputs.size()), inputs_length_);
    const int64_t tg_len = std::min<int64_t>(static_cast<int64_t>(ex.targets.size()), targets_length_);
    if (pack_) {
      if (in_used + in_len > inputs_length_ || tg_used + tg_len > targets_length_) {
        ++row;  // does not fit: next row
        in_used = tg_used = 0;
        segment = 0;
      }
    } else if (i > 0) {
      ++row;
      in_used = tg_used = 0;
    }
    if (row >= rows) break;
    if (in_len < static_cast<int64_t>(ex.inputs.size()) || tg_len < static_cast<int64_t>(ex.targets.size())) {
      ++b.truncated_examples;
    }
    ++segment;
    const int64_t in_base = row * inputs_length_ + in_used;
    const int64_t tg_base = row * targets_length_ + tg_used;
    for (int64_t t = 0; t < in_len; ++t) {
      b.encoder_input_tokens[in_base + t] = ex.inputs[t];
      if (pack_) {
        b.encoder_segment_ids[in_base + t] = segment;
        b.encoder_positions[in_base + t] = static_cast<int32_t>(t);
      }
    }
    for (int64_t t = 0; t < tg_len; ++t) {
      b.decoder_target_tokens[tg_base + t] = ex.targets[t];
      // Shifted right within the example: its first input is 0.
      b.decoder_input_tokens[tg_base + t] = t == 0 ? 0 : ex.targets[t - 1];
      b.decoder_loss_weights[tg_base + t] = ex.targets[t] != 0 ? 1.0f : 0.0f;
      if (pack_) {
        b.decoder_segment_ids[tg_base + t] = segment;
        b.decoder_positions[tg_base + t] = static_cast<int32_t>(t);
      }
    }
    in_used += in_len;
    tg_used += tg_len;
    ++b.examples;
    b.input_tokens += in_len;
    b.target_tokens += tg_len;
  }
  *consumed = i;
  return b;
}

}  // namespace trainyard

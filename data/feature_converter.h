// seqio's EncDecFeatureConverter: tokenized {inputs, targets} examples to the
// model's features, padded to fixed lengths, with or without packing.
//
// Unpacked: one example per row; decoder_input_tokens are the targets
// shifted right with 0 first; loss weights are 1 on real target tokens.
// Packed (T5X's default for training): examples are placed greedily, in
// order, into the current row while both its inputs and targets still fit,
// else a new row starts; each example gets a segment id (1, 2, ...) and
// positions from 0; decoder inputs are shifted within each segment, so a
// segment never sees another's tokens. Examples longer than the lengths are
// truncated (counted).
//
// Rows are plain int32 vectors (row-major [rows, length]); model/ turns them
// into tensors. Thread-safety: a converter is immutable; Convert is
// thread-safe.
#ifndef TRAINYARD_DATA_FEATURE_CONVERTER_H_
#define TRAINYARD_DATA_FEATURE_CONVERTER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainyard {

struct TokenizedExample {
  std::vector<int32_t> inputs;  // EOS included if the task appends it
  std::vector<int32_t> targets;
};

struct ConvertedBatch {
  int64_t rows = 0;
  int64_t inputs_length = 0;
  int64_t targets_length = 0;
  std::vector<int32_t> encoder_input_tokens;   // [rows, inputs_length]
  std::vector<int32_t> decoder_input_tokens;   // [rows, targets_length]
  std::vector<int32_t> decoder_target_tokens;  // [rows, targets_length]
  std::vector<float> decoder_loss_weights;     // [rows, targets_length]
  // Packed only (empty otherwise).
  std::vector<int32_t> encoder_segment_ids, decoder_segment_ids;
  std::vector<int32_t> encoder_positions, decoder_positions;
  // Bookkeeping for metrics.
  int64_t examples = 0;
  int64_t truncated_examples = 0;
  int64_t input_tokens = 0;  // real (non-padding) tokens
  int64_t target_tokens = 0;

  bool packed() const { return !encoder_segment_ids.empty(); }
  // Fraction of the target positions that hold real tokens.
  double target_non_padding_fraction() const;
  double input_non_padding_fraction() const;
};

class FeatureConverter {
 public:
  FeatureConverter(int64_t inputs_length, int64_t targets_length, bool pack);

  // Converts `examples` into as many rows as they need (unpacked: one each).
  ConvertedBatch Convert(const std::vector<TokenizedExample>& examples) const;

  // Packs examples into exactly `rows` rows: returns how many of `examples`
  // (from the front) were placed; the rest did not fit. Unpacked: min(rows,
  // examples.size()). Rows left over are all padding.
  ConvertedBatch ConvertToRows(const std::vector<TokenizedExample>& examples, int64_t rows, size_t* consumed) const;

 private:
  int64_t inputs_length_;
  int64_t targets_length_;
  bool pack_;
};

}  // namespace trainyard

#endif  // TRAINYARD_DATA_FEATURE_CONVERTER_H_

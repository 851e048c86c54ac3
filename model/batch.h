// The encoder-decoder features of T5X (seqio's EncDecFeatureConverter), as
// LibTorch tensors. All token tensors are int64 [batch, length]; 0 is padding.
//
// Packed batches (several examples per row) also carry segment ids (1, 2, ...
// per example, 0 on padding) and positions (0-based within each example);
// unpacked batches leave them undefined.
#ifndef TRAINYARD_MODEL_BATCH_H_
#define TRAINYARD_MODEL_BATCH_H_

#include <torch/types.h>

#include "absl/status/status.h"

namespace trainyard {

struct T5Batch {
  torch::Tensor encoder_input_tokens;   // [B, Li]
  torch::Tensor decoder_input_tokens;   // [B, Lt]: targets shifted right, 0 first
  torch::Tensor decoder_target_tokens;  // [B, Lt]
  torch::Tensor decoder_loss_weights;   // [B, Lt] float; 0 on padding

  torch::Tensor encoder_segment_ids;  // packed only
  torch::Tensor decoder_segment_ids;
  torch::Tensor encoder_positions;
  torch::Tensor decoder_positions;

  bool packed() const { return encoder_segment_ids.defined(); }
  int64_t batch_size() const { return encoder_input_tokens.size(0); }

  // Rows [start, start + size) of every defined feature (views, no copy).
  T5Batch Slice(int64_t start, int64_t size) const;
  // The rows at `indices` (int64, may repeat) of every defined feature.
  T5Batch SelectRows(const torch::Tensor& indices) const;
  // Every defined feature moved to `device`.
  T5Batch To(const torch::Device& device) const;
};

// A batch of `rows` examples with the given lengths and dummy contents
// (token 1 everywhere, every target position weighted; packed: one segment
// per row), for warming up the kernels of a shape without reading data
// (T5X compiles its steps on such a batch).
T5Batch ShapeOnlyBatch(int64_t rows, int64_t inputs_length, int64_t targets_length, bool packed);

// Checks shapes and dtypes: kInvalidArgument naming the feature otherwise.
// `need_targets`: decoder features must be present (training, scoring).
absl::Status ValidateBatch(const T5Batch& batch, bool need_targets);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_BATCH_H_

#include "model/batch.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

std::string Shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&s, i ? ", " : "", t.size(i));
  return s + "]";
}

template <typename F>
void ForEachFeature(const T5Batch& in, T5Batch* out, F f) {
  auto apply = [&](const torch::Tensor& a, torch::Tensor* b) {
    if (a.defined()) *b = f(a);
  };
  apply(in.encoder_input_tokens, &out->encoder_input_tokens);
  apply(in.decoder_input_tokens, &out->decoder_input_tokens);
  apply(in.decoder_target_tokens, &out->decoder_target_tokens);
  apply(in.decoder_loss_weights, &out->decoder_loss_weights);
  apply(in.encoder_segment_ids, &out->encoder_segment_ids);
  apply(in.decoder_segment_ids, &out->decoder_segment_ids);
  apply(in.encoder_positions, &out->encoder_positions);
  apply(in.decoder_positions, &out->decoder_positions);
}

}  // namespace

T5Batch T5Batch::Slice(int64_t start, int64_t size) const {
  T5Batch out;
  ForEachFeature(*this, &out, [&](const torch::Tensor& t) { return t.narrow(0, start, size); });
  return out;
}

T5Batch T5Batch::SelectRows(const torch::Tensor& indices) const {
  T5Batch out;
  ForEachFeature(*this, &out, [&](const torch::Tensor& t) { return t.index_select(0, indices); });
  return out;
}

T5Batch ShapeOnlyBatch(int64_t rows, int64_t inputs_length, int64_t targets_length, bool packed) {
  T5Batch out;
  out.encoder_input_tokens = torch::ones({rows, inputs_length}, torch::kLong);
  out.decoder_target_tokens = torch::ones({rows, targets_length}, torch::kLong);
  // The targets shifted right: 0 first.
  out.decoder_input_tokens = torch::ones({rows, targets_length}, torch::kLong);
  if (targets_length > 0) out.decoder_input_tokens.select(1, 0).zero_();
  out.decoder_loss_weights = torch::ones({rows, targets_length}, torch::kFloat);
  if (packed) {
    out.encoder_segment_ids = torch::ones({rows, inputs_length}, torch::kLong);
    out.decoder_segment_ids = torch::ones({rows, targets_length}, torch::kLong);
    out.encoder_positions = torch::arange(inputs_length, torch::kLong).expand({rows, inputs_length}).contiguous();
    out.decoder_positions = torch::arange(targets_length, torch::kLong).expand({rows, targets_length}).contiguous();
  }
  return out;
}

T5Batch T5Batch::To(const torch::Device& device) const {
  T5Batch out;
  ForEachFeature(*this, &out, [&](const torch::Tensor& t) { return t.to(device); });
  return out;
}

absl::Status ValidateBatch(const T5Batch& batch, bool need_targets) {
  const torch::Tensor& enc = batch.encoder_input_tokens;
  if (!enc.defined() || enc.dim() != 2 || enc.scalar_type() != torch::kLong) {
    return absl::InvalidArgumentError("encoder_input_tokens: want an int64 tensor [batch, length]");
  }
  const int64_t b = enc.size(0);
  if (b == 0) return absl::InvalidArgumentError("encoder_input_tokens: empty batch");
  auto check = [&](const char* name, const torch::Tensor& t, torch::ScalarType type,
                   const torch::Tensor& like) -> absl::Status {
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, ": missing"));
    if (t.dim() != 2 || t.size(0) != b || t.scalar_type() != type || (like.defined() && t.size(1) != like.size(1))) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": shape ", Shape(t), " dtype ",
                                                     c10::toString(t.scalar_type()), "; want ", c10::toString(type),
                                                     " [", b, ", ", like.defined() ? like.size(1) : -1, "]"));
    }
    return absl::OkStatus();
  };
  if (need_targets || batch.decoder_target_tokens.defined()) {
    const torch::Tensor& tgt = batch.decoder_target_tokens;
    if (!tgt.defined()) return absl::InvalidArgumentError("decoder_target_tokens: missing");
    absl::Status s = check("decoder_target_tokens", tgt, torch::kLong, torch::Tensor());
    if (s.ok()) s = check("decoder_input_tokens", batch.decoder_input_tokens, torch::kLong, tgt);
    if (s.ok()) {
      s = check("decoder_loss_weights", batch.decoder_loss_weights, torch::kFloat, tgt);
    }
    if (!s.ok()) return s;
  }
  if (batch.packed()) {
    absl::Status s = check("encoder_segment_ids", batch.encoder_segment_ids, torch::kLong, enc);
    if (s.ok() && batch.decoder_target_tokens.defined()) {
      s = check("decoder_segment_ids", batch.decoder_segment_ids, torch::kLong, batch.decoder_target_tokens);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace trainyard

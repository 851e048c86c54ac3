#include "model/encoder_decoder_model.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch/device.h"

namespace trainyard {
namespace {

// Runs `f`, turning LibTorch's exceptions into a Status (device out of
// memory: kResourceExhausted).
template <typename F>
auto Guard(const char* what, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    return TorchErrorStatus(what, e);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> EncoderDecoderModel::Create(const ModelConfig& config,
                                                                                 const ModelOptions& options) {
  if (config.vocab_size() < 2 || config.d_model() < 1 || config.num_heads() < 1 || config.d_kv() < 1 ||
      config.d_ff() < 1 || config.num_encoder_layers() < 1 || config.num_decoder_layers() < 1 ||
      config.relative_attention_num_buckets() < 2 || config.relative_attention_max_distance() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model config is incomplete: ", config.ShortDebugString()));
  }
  return Guard("building the model", [&]() -> absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> {
    T5 network(config, options.device, options.init_seed, options.hold_parameter);
    return std::unique_ptr<EncoderDecoderModel>(new EncoderDecoderModel(std::move(network), options));
  });
}

std::vector<std::vector<size_t>> EncoderDecoderModel::ParameterUnits() {
  std::map<std::string, size_t> index;
  for (const auto& item : network_->named_parameters()) index.emplace(item.key(), index.size());
  std::vector<std::vector<size_t>> units;
  for (const std::vector<std::string>& names : network_->UnitNames()) {
    std::vector<size_t> unit;
    for (const std::string& name : names) unit.push_back(index.at(name));
    units.push_back(std::move(unit));
  }
  return units;
}

void EncoderDecoderModel::SetHooks(ForwardOptions* forward) const {
  if (hooks_.before) forward->before_unit = &hooks_.before;
  if (hooks_.after) forward->after_unit = &hooks_.after;
  if (hooks_.before_backward) forward->before_unit_backward = &hooks_.before_backward;
}

absl::StatusOr<LossOutput> EncoderDecoderModel::LossFn(const T5Batch& batch, const LossOptions& options,
                                                       at::Generator dropout_rng) {
  TY_RETURN_IF_ERROR(ValidateBatch(batch, /*need_targets=*/true));
  return Guard("loss", [&]() -> absl::StatusOr<LossOutput> {
    ForwardOptions forward;
    forward.train = dropout_rng.defined();
    forward.generator = dropout_rng;
    forward.compute_dtype = options_.compute_dtype;
    SetHooks(&forward);
    const T5Batch on = OnDevice(batch);
    const torch::Tensor logits = network_->forward(on, forward);
    return ComputeLoss(logits, on.decoder_target_tokens, on.decoder_loss_weights, options);
  });
}

absl::StatusOr<Metrics> EncoderDecoderModel::EvalFn(const T5Batch& batch, const LossOptions& options) {
  torch::NoGradGuard no_grad;
  TY_ASSIGN_OR_RETURN(LossOutput out, LossFn(batch, options, at::Generator()));
  return out.metrics;
}

absl::StatusOr<Predictions> EncoderDecoderModel::PredictBatchWithAux(const T5Batch& batch,
                                                                     const DecodeOptions& options) {
  TY_RETURN_IF_ERROR(ValidateBatch(batch, /*need_targets=*/false));
  if (options.max_decode_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_decode_length: ", options.max_decode_length, "; must be >= 1"));
  }
  if (options.method == DecodeOptions::Method::kBeam && options.beam_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("beam_size: ", options.beam_size, "; must be >= 1"));
  }
  if (options.method == DecodeOptions::Method::kSample && !(options.temperature > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature: ", options.temperature, "; must be > 0"));
  }
  if (!options.row_keys.empty() && static_cast<int64_t>(options.row_keys.size()) != batch.batch_size()) {
    return absl::InvalidArgumentError(absl::StrCat("row_keys: ", options.row_keys.size(), " keys for a batch of ",
                                                   batch.batch_size(), " rows; want one per row, or none"));
  }
  return Guard("predict", [&]() -> absl::StatusOr<Predictions> {
    torch::NoGradGuard no_grad;
    DecodeOptions decode = options;
    decode.compute_dtype = options_.compute_dtype;
    DecodeResult result = Decode(*network_, OnDevice(batch).encoder_input_tokens, decode);
    return Predictions{result.tokens.to(torch::kCPU), result.scores.to(torch::kCPU)};
  });
}

absl::StatusOr<torch::Tensor> EncoderDecoderModel::ScoreBatch(const T5Batch& batch) {
  TY_RETURN_IF_ERROR(ValidateBatch(batch, /*need_targets=*/true));
  return Guard("score", [&]() -> absl::StatusOr<torch::Tensor> {
    torch::NoGradGuard no_grad;
    ForwardOptions forward;
    forward.compute_dtype = options_.compute_dtype;
    SetHooks(&forward);
    const T5Batch on = OnDevice(batch);
    const torch::Tensor logits = network_->forward(on, forward);
    return SequenceLogLikelihood(logits, on.decoder_target_tokens, on.decoder_loss_weights).to(torch::kCPU);
  });
}

}  // namespace trainyard

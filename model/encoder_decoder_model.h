// T5X's EncoderDecoderModel over the LibTorch T5 network.
#ifndef TRAINYARD_MODEL_ENCODER_DECODER_MODEL_H_
#define TRAINYARD_MODEL_ENCODER_DECODER_MODEL_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "model/t5.h"
#include "proto/job.pb.h"

namespace trainyard {

struct ModelOptions {
  // Parameters live here; every method takes host batches and moves them.
  torch::Device device = torch::kCPU;
  torch::ScalarType compute_dtype = torch::kFloat32;
  uint64_t init_seed = 0;
  // The parameters (by name) this process keeps; null: all. With PARAMETERS
  // sharding a rank holds only its own, and the others' are released as
  // they are drawn (T5Impl's constructor), so the whole model never exists
  // on the rank.
  std::function<bool(const std::string&)> hold_parameter;
};

class EncoderDecoderModel : public Model {
 public:
  // kInvalidArgument if the config cannot build a model.
  static absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> Create(const ModelConfig& config,
                                                                     const ModelOptions& options);

  absl::StatusOr<LossOutput> LossFn(const T5Batch& batch, const LossOptions& options,
                                    at::Generator dropout_rng) override;
  absl::StatusOr<Metrics> EvalFn(const T5Batch& batch, const LossOptions& options) override;
  absl::StatusOr<Predictions> PredictBatchWithAux(const T5Batch& batch, const DecodeOptions& options) override;
  absl::StatusOr<torch::Tensor> ScoreBatch(const T5Batch& batch) override;

  std::vector<torch::Tensor> parameters() override { return network_->parameters(); }
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() override { return network_->named_parameters(); }
  // T5Impl::UnitNames, as indices.
  std::vector<std::vector<size_t>> ParameterUnits() override;
  void SetUnitHooks(UnitHooks hooks) override { hooks_ = std::move(hooks); }

  T5& network() { return network_; }
  const ModelOptions& options() const { return options_; }

 private:
  EncoderDecoderModel(T5 network, const ModelOptions& options) : network_(std::move(network)), options_(options) {}
  // The batch on the parameters' device (callers pass host batches);
  // predictions and scores come back to the host.
  T5Batch OnDevice(const T5Batch& batch) const { return options_.device.is_cpu() ? batch : batch.To(options_.device); }

  // The unit hooks of the teacher-forced passes (ForwardOptions).
  void SetHooks(ForwardOptions* forward) const;

  T5 network_;
  UnitHooks hooks_;
  ModelOptions options_;
};

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_ENCODER_DECODER_MODEL_H_

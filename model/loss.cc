#include "model/loss.h"

#include <cmath>

#include "model/fused.h"

namespace trainyard {

LossOptions LossOptions::FromConfig(const LossConfig& config) {
  LossOptions options;
  options.z_loss = config.has_z_loss() ? config.z_loss() : 1e-4;
  options.label_smoothing = config.label_smoothing();
  options.normalization = config.normalization() == LossConfig::NORMALIZATION_UNSPECIFIED
                              ? LossConfig::NUM_TARGET_TOKENS
                              : config.normalization();
  options.normalizing_constant = config.normalizing_constant();
  return options;
}

LossOutput ComputeLoss(const torch::Tensor& logits_in, const torch::Tensor& targets, const torch::Tensor& weights_in,
                       const LossOptions& options) {
  const torch::Tensor logits = logits_in.to(torch::kFloat);
  const int64_t vocab = logits.size(-1);
  const torch::Tensor weights =
      weights_in.defined() ? weights_in.to(torch::kFloat) : torch::ones_like(targets, logits.options());

  torch::Tensor token_loss, token_z_loss, predicted;
  if (fused::CrossEntropyApplies(logits)) {
    // One pass forward, one backward, no [B, L, V] temporaries but the
    // gradient (model/fused.h).
    fused::CrossEntropyOutput ce = fused::CrossEntropy(logits.reshape({-1, vocab}), targets.reshape({-1}),
                                                       options.z_loss, options.label_smoothing);
    token_loss = ce.token_loss.view(targets.sizes());
    token_z_loss = options.z_loss * ce.log_z.view(targets.sizes()).pow(2);
    predicted = ce.argmax.view(targets.sizes());
  } else {
    const torch::Tensor log_z = torch::logsumexp(logits, -1);
    const torch::Tensor log_softmax = logits - log_z.unsqueeze(-1);
    const torch::Tensor target_log_prob = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
    const double confidence = 1.0 - options.label_smoothing;
    if (options.label_smoothing > 0.0) {
      const double low = options.label_smoothing / static_cast<double>(vocab - 1);
      const double entropy = -(confidence * std::log(confidence) + (vocab - 1) * low * std::log(low + 1e-20));
      token_loss = -(confidence * target_log_prob + low * (log_softmax.sum(-1) - target_log_prob)) - entropy;
    } else {
      token_loss = -target_log_prob;
    }
    token_z_loss = options.z_loss * log_z.pow(2);
    token_loss = token_loss + token_z_loss;
    predicted = logits.argmax(-1);
  }

  const torch::Tensor num_weights = weights.sum();
  double factor = 1.0;
  if (options.loss_normalizing_factor.has_value()) {
    factor = *options.loss_normalizing_factor;
  } else if (options.normalization == LossConfig::NUM_TARGET_TOKENS) {
    factor = std::max(num_weights.item<double>(), 1.0);
  } else if (options.normalization == LossConfig::CONSTANT) {
    factor = options.normalizing_constant;
  }
  LossOutput out;
  out.loss = (token_loss * weights).sum() / factor;
  out.z_loss = (token_z_loss * weights).sum() / factor;

  const torch::Tensor num_tokens =
      torch::tensor(static_cast<double>(targets.numel()), torch::TensorOptions().dtype(torch::kDouble));
  const torch::Tensor correct = (predicted.eq(targets).to(torch::kFloat) * weights).sum();
  const torch::Tensor cross_ent = out.loss - out.z_loss;
  Metrics& m = out.metrics;
  m["loss"] = Metric::AveragePerStep(out.loss);
  m["z_loss"] = Metric::AveragePerStep(out.z_loss);
  m["cross_ent_loss"] = Metric::AveragePerStep(cross_ent);
  m["accuracy"] = Metric::Average(correct, num_weights);
  m["loss_per_nonpadding_target_token"] = Metric::Average(out.loss, num_weights);
  m["loss_per_all_target_tokens"] = Metric::Average(out.loss, num_tokens);
  m["cross_ent_loss_per_all_target_tokens"] = Metric::Average(cross_ent, num_tokens);
  m["z_loss_per_all_target_tokens"] = Metric::Average(out.z_loss, num_tokens);
  m["non_padding_fraction/loss_weights"] = Metric::Average(num_weights, num_tokens);
  return out;
}

torch::Tensor SequenceLogLikelihood(const torch::Tensor& logits, const torch::Tensor& targets,
                                    const torch::Tensor& weights) {
  const torch::Tensor log_probs =
      torch::log_softmax(logits.to(torch::kFloat), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  const torch::Tensor w = weights.defined() ? weights.to(torch::kFloat) : targets.gt(0).to(torch::kFloat);
  return (log_probs * w).sum(-1);
}

}  // namespace trainyard

// T5X's losses: cross-entropy with z-loss and label smoothing, weighted by
// decoder_loss_weights and divided by a loss-normalising factor, with T5X's
// base metrics.
#ifndef TRAINYARD_MODEL_LOSS_H_
#define TRAINYARD_MODEL_LOSS_H_

#include <torch/types.h>

#include "absl/types/optional.h"
#include "model/metrics.h"
#include "proto/job.pb.h"

namespace trainyard {

struct LossOptions {
  double z_loss = 1e-4;
  double label_smoothing = 0.0;
  LossConfig::Normalization normalization = LossConfig::NUM_TARGET_TOKENS;
  double normalizing_constant = 1.0;  // with CONSTANT
  // Overrides the batch's own factor. A trainer passes the global batch's
  // number of real target tokens, so that microbatch and rank losses sum to
  // the full-batch loss.
  absl::optional<double> loss_normalizing_factor;

  static LossOptions FromConfig(const LossConfig& config);
};

struct LossOutput {
  torch::Tensor loss;    // scalar, differentiable: includes z-loss
  torch::Tensor z_loss;  // scalar, the z-loss part
  Metrics metrics;
};

// logits [B, L, V] float32, targets [B, L] int64, weights [B, L] float32
// (undefined = all ones).
//   per token: -sum_v q(v) log p(v) - c + z_loss * log(Z)^2
// where q puts 1 - ls on the target and ls / (V - 1) elsewhere, and c is q's
// entropy (so a perfect prediction scores 0).
// On the CPU the per-token loss is model/fused.h's CrossEntropy (no
// log-softmax materialised); elsewhere the formula in ATen ops.
// Metrics: loss, cross_ent_loss, z_loss, accuracy,
// loss_per_nonpadding_target_token, loss_per_all_target_tokens,
// cross_ent_loss_per_all_target_tokens, z_loss_per_all_target_tokens,
// non_padding_fraction/loss_weights.
LossOutput ComputeLoss(const torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& weights,
                       const LossOptions& options);

// Sum over positions of log p(target) * weight: [B].
torch::Tensor SequenceLogLikelihood(const torch::Tensor& logits, const torch::Tensor& targets,
                                    const torch::Tensor& weights);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_LOSS_H_

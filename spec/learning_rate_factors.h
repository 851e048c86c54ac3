// The factors of T5X's learning-rate factor strings ("constant *
// rsqrt_decay"): their names, what each needs, and the default string. The
// one table the spec's validation and the trainer's schedule
// (trainer/learning_rate.h, which says what each computes) read.
//
// Thread-safety: constants and pure functions.
#ifndef TRAINYARD_SPEC_LEARNING_RATE_FACTORS_H_
#define TRAINYARD_SPEC_LEARNING_RATE_FACTORS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainyard {

enum class LearningRateFactor {
  kConstant,
  kLinearWarmup,
  kRsqrtDecay,
  kRsqrtNormalizedDecay,
  kDecayEvery,
  kCosineDecay,
  kLinearDecay,
};

// T5X's default (and a spec's, when learning_rate.factors is empty).
inline constexpr char kDefaultLearningRateFactors[] = "constant * rsqrt_decay";

// The factor of that name (exact, lower case); nullopt for an unknown one.
std::optional<LearningRateFactor> ParseLearningRateFactor(absl::string_view name);
// Every factor's name, in the enum's order.
const std::vector<std::string>& LearningRateFactorNames();
// Factors that divide by warmup_steps: linear_warmup, rsqrt_decay,
// rsqrt_normalized_decay (warmup_steps > 0).
bool NeedsWarmupSteps(LearningRateFactor factor);
// decay_every needs steps_per_decay > 0; cosine_decay and linear_decay need
// steps_per_cycle > 0.
bool NeedsStepsPerDecay(LearningRateFactor factor);
bool NeedsStepsPerCycle(LearningRateFactor factor);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_LEARNING_RATE_FACTORS_H_

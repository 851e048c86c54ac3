#include "spec/learning_rate_factors.h"

namespace trainyard {

const std::vector<std::string>& LearningRateFactorNames() {
  static const std::vector<std::string>* const names = new std::vector<std::string>{
      "constant",    "linear_warmup", "rsqrt_decay",  "rsqrt_normalized_decay",
      "decay_every", "cosine_decay",  "linear_decay",
  };
  return *names;
}

std::optional<LearningRateFactor> ParseLearningRateFactor(absl::string_view name) {
  const std::vector<std::string>& names = LearningRateFactorNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (name == names[i]) return static_cast<LearningRateFactor>(i);
  }
  return std::nullopt;
}

bool NeedsWarmupSteps(LearningRateFactor factor) {
  return factor == LearningRateFactor::kLinearWarmup || factor == LearningRateFactor::kRsqrtDecay ||
         factor == LearningRateFactor::kRsqrtNormalizedDecay;
}

bool NeedsStepsPerDecay(LearningRateFactor factor) { return factor == LearningRateFactor::kDecayEvery; }

bool NeedsStepsPerCycle(LearningRateFactor factor) {
  return factor == LearningRateFactor::kCosineDecay || factor == LearningRateFactor::kLinearDecay;
}

}  // namespace trainyard

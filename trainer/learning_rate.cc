#include "trainer/learning_rate.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainyard {

absl::StatusOr<LearningRateCallable> LearningRateCallable::Create(const LearningRateSchedule& config) {
  LearningRateCallable schedule;
  schedule.config_ = config;
  const std::string factors = config.factors().empty() ? kDefaultLearningRateFactors : config.factors();
  if (!config.has_base_learning_rate()) schedule.config_.set_base_learning_rate(1.0f);
  if (!config.has_decay_factor()) schedule.config_.set_decay_factor(0.5f);
  for (absl::string_view raw : absl::StrSplit(factors, '*')) {
    const std::string name(absl::StripAsciiWhitespace(raw));
    const std::optional<Factor> parsed = ParseLearningRateFactor(name);
    if (!parsed.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("learning_rate.factors: unknown factor \"", name, "\""));
    }
    const Factor factor = *parsed;
    if (NeedsWarmupSteps(factor) && config.warmup_steps() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("learning_rate.warmup_steps: ", config.warmup_steps(), "; factor ",
                                                     name, " needs warmup_steps > 0"));
    }
    if (NeedsStepsPerDecay(factor) && config.steps_per_decay() <= 0) {
      return absl::InvalidArgumentError("learning_rate.steps_per_decay: decay_every needs > 0");
    }
    if (NeedsStepsPerCycle(factor) && config.steps_per_cycle() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("learning_rate.steps_per_cycle: ", name, " needs > 0"));
    }
    schedule.factors_.push_back(factor);
  }
  return schedule;
}

double LearningRateCallable::operator()(int64_t raw_step) const {
  const double step = static_cast<double>(std::max<int64_t>(0, raw_step - config_.step_offset()));
  const double warmup = static_cast<double>(config_.warmup_steps());
  double rate = 1.0;
  for (Factor factor : factors_) {
    switch (factor) {
      case Factor::kConstant:
        rate *= config_.base_learning_rate();
        break;
      case Factor::kLinearWarmup:
        rate *= std::min(1.0, step / warmup);
        break;
      case Factor::kRsqrtDecay:
        rate /= std::sqrt(std::max(step, warmup));
        break;
      case Factor::kRsqrtNormalizedDecay:
        rate *= std::sqrt(warmup) / std::sqrt(std::max(step, warmup));
        break;
      case Factor::kDecayEvery:
        rate *= std::pow(static_cast<double>(config_.decay_factor()),
                         std::floor(step / static_cast<double>(config_.steps_per_decay())));
        break;
      case Factor::kCosineDecay: {
        const double progress = std::max(0.0, (step - warmup) / static_cast<double>(config_.steps_per_cycle()));
        rate *= std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(progress, 1.0))));
        break;
      }
      case Factor::kLinearDecay: {
        const double progress = std::max(0.0, (step - warmup) / static_cast<double>(config_.steps_per_cycle()));
        rate *= 1.0 - std::fmod(progress, 1.0);
        break;
      }
    }
  }
  return std::max(rate, static_cast<double>(config_.min_learning_rate()));
}

}  // namespace trainyard

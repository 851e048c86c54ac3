// LearningRateCallable: learning-rate schedules as T5X's factor strings (t5x.utils'
// create_learning_rate_scheduler): the rate at a step is the product of the
// named factors, floored at min_learning_rate:
//   constant               base_learning_rate
//   linear_warmup          min(1, step / warmup_steps)
//   rsqrt_decay            1 / sqrt(max(step, warmup_steps))
//   rsqrt_normalized_decay sqrt(warmup_steps) / sqrt(max(step, warmup_steps))
//   decay_every            decay_factor ^ floor(step / steps_per_decay)
//   cosine_decay           max(0, 0.5 (1 + cos(pi (p mod 1)))),
//                          p = max(0, (step - warmup_steps) / steps_per_cycle)
//   linear_decay           1 - (p mod 1)
// where step is max(0, step - step_offset).
//
// Thread-safety: immutable after construction.
#ifndef TRAINYARD_TRAINER_LEARNING_RATE_H_
#define TRAINYARD_TRAINER_LEARNING_RATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "spec/learning_rate_factors.h"

namespace trainyard {

class LearningRateCallable {
 public:
  // kInvalidArgument for an unknown factor or a parameter a factor cannot
  // use (e.g. rsqrt_decay with warmup_steps 0).
  static absl::StatusOr<LearningRateCallable> Create(const LearningRateSchedule& config);

  // The rate for `step` (0-based: the step being taken).
  double operator()(int64_t step) const;

 private:
  using Factor = LearningRateFactor;
  std::vector<Factor> factors_;
  LearningRateSchedule config_;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_LEARNING_RATE_H_

// The model interface the trainer and the interactive model use, after T5X's
// BaseModel: a loss for training, an evaluation step, prediction with
// auxiliary values, and scoring. Implemented by EncoderDecoderModel (T5).
//
// Every method catches LibTorch's exceptions and returns them as a Status
// (kInvalidArgument for a malformed batch, kInternal otherwise).
// Thread-safety: not thread-safe; one thread drives a model.
#ifndef TRAINYARD_MODEL_MODEL_H_
#define TRAINYARD_MODEL_MODEL_H_

#include <functional>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/batch.h"
#include "model/decoding.h"
#include "model/loss.h"
#include "model/metrics.h"

namespace trainyard {

struct Predictions {
  torch::Tensor tokens;  // [B, max_decode_length], 0 after EOS
  torch::Tensor scores;  // [B] (aux "scores")
};

class Model {
 public:
  virtual ~Model() = default;

  // Training loss with dropout masks from `dropout_rng` (undefined: no
  // dropout). The loss is differentiable w.r.t. parameters().
  virtual absl::StatusOr<LossOutput> LossFn(const T5Batch& batch, const LossOptions& options,
                                            at::Generator dropout_rng) = 0;
  // Loss metrics without dropout or gradients.
  virtual absl::StatusOr<Metrics> EvalFn(const T5Batch& batch, const LossOptions& options) = 0;
  // Decoded tokens and their scores.
  virtual absl::StatusOr<Predictions> PredictBatchWithAux(const T5Batch& batch, const DecodeOptions& options) = 0;
  // Log-likelihood of each example's targets given its inputs: [B].
  virtual absl::StatusOr<torch::Tensor> ScoreBatch(const T5Batch& batch) = 0;

  virtual std::vector<torch::Tensor> parameters() = 0;
  virtual torch::OrderedDict<std::string, torch::Tensor> named_parameters() = 0;

  // The parameters in groups ("units") as indices into named_parameters(),
  // every parameter in exactly one, in the order a teacher-forced pass
  // (LossFn, EvalFn, ScoreBatch) first reads them. Such a pass calls the
  // hooks set with SetUnitHooks (decoding does not). Sharded training
  // gathers each unit's parameters in `before`, overlapping the all-gather
  // with the forward pass (trainer/parameter_gatherer.h). An exception from
  // a hook ends the pass with an error. A model that returns no units never
  // calls a hook, and its parameters are gathered before the step.
  virtual std::vector<std::vector<size_t>> ParameterUnits() { return {}; }
  struct UnitHooks {
    // Before the pass first reads unit u's parameters, u increasing.
    std::function<void(int)> before;
    // After the pass last reads them, u increasing; unit 0 at the end of the
    // pass (its parameters are read in several places).
    std::function<void(int)> after;
    // In the backward pass of a LossFn's loss, before any gradient of unit
    // u's computation is computed, u decreasing; never for unit 0 (whose
    // output feeds several places), so unit 0 stays whole through backward.
    std::function<void(int)> before_backward;
  };
  // Hooks left empty are not called. Replaces the hooks set before; the
  // hooks live until the next call, so a backward pass must end before it.
  virtual void SetUnitHooks(UnitHooks /*hooks*/) {}
};

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_MODEL_H_

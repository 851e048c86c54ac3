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
  // (LossFn, EvalFn, ScoreBatch) first reads them; such a pass calls the
  // hook set here with a unit's index before it first reads that unit,
  // in increasing order (decoding does not call it). Sharded training
  // gathers each unit's parameters there, overlapping the all-gather with
  // the forward pass (trainer/parameter_gatherer.h). An exception from the
  // hook ends the pass with an error. A model that returns no units never
  // calls a hook, and its parameters are gathered before the step.
  virtual std::vector<std::vector<size_t>> ParameterUnits() { return {}; }
  virtual void SetBeforeUnitHook(std::function<void(int)> /*hook*/) {}
};

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_MODEL_H_

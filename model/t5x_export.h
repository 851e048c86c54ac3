// Our model as a T5X checkpoint (checkpoint/t5x_checkpoint.h), the inverse
// of t5x_import.h: every parameter under T5X's name and in its layout
// (t5x/examples/t5/network.py, T5 1.0 and T5.1.1: dense kernels [in, out],
// so ours transposed), and our Adafactor's statistics as T5X's Adafactor
// keeps them (t5x/adafactor.py): per parameter v_row and v_col (factored;
// for a square kernel the two swap, as T5X factors along its own dimension
// order) or v (transposed with its kernel), m when there is one, and zeros
// of shape [1] in the unused slots, as T5X's init_param_state leaves them.
// The statistics are written as ours factor them; T5X's restore reads them
// into an Adafactor that factors alike (its min_dim_size_to_factor the
// job's, 128 by default in both).
//
// Without Adafactor's statistics (an AdamW checkpoint, whose moments are
// not Adafactor's, or a model-only one) the checkpoint holds the parameters
// and the step only: `state` has no param_states. T5X restores it with its
// optimizer state initialized afresh when its RestoreCheckpointConfig has
// fallback_to_scratch=True (which wants a state transformation, e.g.
// assignment_map=((r"state/param_states.*", None),)).
#ifndef TRAINYARD_MODEL_T5X_EXPORT_H_
#define TRAINYARD_MODEL_T5X_EXPORT_H_

#include <cstdint>
#include <map>
#include <string>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "checkpoint/t5x_checkpoint.h"
#include "model/weights.h"

namespace trainyard {

// `params`: our parameters by name; `adafactor`: our Adafactor's slots
// ("<param>/v_row", "<param>/v_col", "<param>/v", "<param>/m"; "step" is
// passed over), or empty for the parameters and the step only.
// `param_dtype`: T5X's save dtype for the parameters, kFloat or kBFloat16
// (the statistics are float32, as T5X keeps them). A parameter that is not
// one of T5 1.0 or T5.1.1 in T5X's layout, a parameter without statistics
// (neither v_row and v_col nor v), a statistic of the wrong shape or one of
// no parameter is kInvalidArgument naming it.
// Why a Trainyard checkpoint's optimizer state is not Adafactor's
// statistics to export, or "" when it is: `optimizer` is its state (empty,
// or only "step": none), `metadata_json` its metadata.json, whose job spec
// names the optimizer (AdamW's moments are not Adafactor's); a checkpoint
// without a job spec (a T5X import) or whose spec names none has
// Adafactor's. kDataLoss for metadata that is not JSON.
absl::StatusOr<std::string> WhyNotAdafactorState(const std::string& metadata_json,
                                                 const std::map<std::string, torch::Tensor>& optimizer);

absl::StatusOr<T5xCheckpoint> ExportT5x(const TensorMap& params, const std::map<std::string, torch::Tensor>& adafactor,
                                        int64_t step, torch::ScalarType param_dtype);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_T5X_EXPORT_H_

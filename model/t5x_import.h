// T5X checkpoints (checkpoint/t5x_checkpoint.h) as our model: the
// architecture read off the parameters' shapes, every parameter renamed to
// ours (T5X's dense kernels are [in, out], ours [out, in]: transposed), and
// T5X's Adafactor statistics (v_row, v_col, v, m) as our Adafactor's slots,
// so training continues with them at the checkpoint's step.
//
// T5X's layouts (t5x/examples/t5/network.py): T5 1.0 (`mlp/wi`, relu, logits
// through the shared embedding) and T5.1.1 (`mlp/wi_0`/`wi_1`, gated GELU,
// `decoder/logits_dense`), one relative-position table per stack. Anything
// else (a scanned or per-layer-bias layout, a tensor we have no parameter
// for, a missing one, a shape that disagrees) is kInvalidArgument naming the
// tensor.
#ifndef TRAINYARD_MODEL_T5X_IMPORT_H_
#define TRAINYARD_MODEL_T5X_IMPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/weights.h"
#include "proto/job.pb.h"

namespace trainyard {

struct T5xImport {
  std::string dir;  // the checkpoint_<step> directory read
  int64_t step = 0;
  // From the shapes; relative_attention_max_distance 128 and layer-norm
  // epsilon 1e-6 (T5X's, fixed in its network); dropout as our presets have
  // it (0.1 for T5 1.0, 0 for T5.1.1): a job spec sets its own.
  ModelConfig config;
  TensorMap params;  // our names, float32
  // Our Adafactor's state ("<param>/v_row", ...), empty when the checkpoint
  // holds no Adafactor statistics; `optimizer_note` says why.
  std::map<std::string, torch::Tensor> optimizer;
  std::string optimizer_note;
};

// Reads and converts. `path` as ReadT5xCheckpoint takes it.
absl::StatusOr<T5xImport> ImportT5x(const std::string& path);

// T5X's parameter path ("encoder/layers_0/mlp/wi_0/kernel") as our
// parameter's name ("encoder_layers.0.mlp.wi_0.weight") and whether T5X's
// layout is ours transposed (its dense kernels); nullopt for a path that is
// no parameter of T5 1.0 or T5.1.1 in T5X's layout.
std::optional<std::pair<std::string, bool>> OurT5xParameterName(const std::string& t5x_path);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_T5X_IMPORT_H_

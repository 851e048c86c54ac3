// Reading T5X checkpoints (google-research/t5x, checkpoints.py; the format
// with version 3 that T5X's Checkpointer writes):
//
//   checkpoint_<step>/checkpoint     msgpack of {"version": 3, "optimizer":
//                                    {"target": params, "state": {"step",
//                                    "param_states": ...}}} (flax's
//                                    serialization: arrays as ext 1 or 3
//                                    holding [shape, dtype name, bytes])
//   checkpoint_<step>/<dotted name>/ a zarr v2 array for each leaf stored in
//                                    TensorStore; the msgpack holds its spec
//                                    ({"driver": "zarr", "kvstore": {"path":
//                                    <relative>}, "metadata": {...}})
//
// Arrays inline, in zarr directories (checkpoint/zarr.h) and flax's chunked
// inline arrays are all read; a spec's path must stay inside the checkpoint
// directory. Orbax-format checkpoints (newer T5X: a `state/` directory or a
// `_METADATA` file) and version-less or version 1 files are refused with the
// reason. Errors name the file and the leaf.
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_T5X_CHECKPOINT_H_
#define TRAINYARD_CHECKPOINT_T5X_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/zarr.h"

namespace trainyard {

struct T5xCheckpoint {
  std::string dir;  // the checkpoint_<step> directory read
  int version = 0;
  int64_t step = 0;  // optimizer.state.step (0 when absent)
  // Leaves by their path below optimizer/target and optimizer/state, joined
  // with '/': "encoder/layers_0/attention/query/kernel",
  // "param_states/encoder/layers_0/attention/query/kernel/v_row". Empty
  // leaves (None) are left out.
  std::map<std::string, ZarrArray> target;
  std::map<std::string, ZarrArray> state;
};

// `path`: a checkpoint_<step> directory, its `checkpoint` file, or a model
// directory (then its newest checkpoint_<step> that has a `checkpoint` file).
absl::StatusOr<T5xCheckpoint> ReadT5xCheckpoint(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_T5X_CHECKPOINT_H_

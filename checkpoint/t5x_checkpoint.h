// T5X checkpoints (google-research/t5x, checkpoints.py; the format with
// version 3 that T5X's Checkpointer writes), read and written:
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
// directory. Version-less or version 1 files are refused with the reason.
//
// Orbax-format checkpoints (newer T5X's OrbaxCheckpointManagerInterface)
// are read too: checkpoint_<step>/state/_METADATA and the `state` item's
// leaves, with OCDBT or without (checkpoint/orbax_checkpoint.h), "target/..."
// as the parameters and "state/..." as the state; a `state/` or `_METADATA`
// without state/_METADATA is refused. Errors name the file and the leaf.
//
// Written as T5X's Checkpointer writes one: the leaves T5X partitions (and
// so stores with TensorStore) as zarr arrays named by their dotted path
// ("target.encoder.layers_0.mlp.wi.kernel"), gzip, T5X's chunk shapes, the
// spec as TensorStore's `to_json` gives it; the rest inline as flax arrays
// (ext 1 of [shape, dtype name, bytes]). Which is which follows T5X's
// Adafactor (adafactor.py, derive_logical_axes): every parameter and every
// other state leaf is stored, except Adafactor's `v_row` and `v_col`, the
// unused slots of shape [1] and the step (an int32 scalar), which are
// inline. Every map's keys are sorted, as JAX's tree_map leaves T5X's state
// dict; "version" comes before "optimizer", as in T5X's literal.
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
  std::string dir;   // the checkpoint_<step> directory read
  std::string file;  // the file errors name: dir/checkpoint, dir/state/_METADATA
  int version = 0;   // of the msgpack format (0 for an Orbax checkpoint)
  int64_t step = 0;  // optimizer.state.step (0 when absent)
  // Leaves by their path below optimizer/target and optimizer/state, joined
  // with '/': "encoder/layers_0/attention/query/kernel",
  // "param_states/encoder/layers_0/attention/query/kernel/v_row". Empty
  // leaves (None) are left out.
  std::map<std::string, ZarrArray> target;
  std::map<std::string, ZarrArray> state;
};

// `path`: a checkpoint_<step> directory, its `checkpoint` file or `state`
// item, or a model directory (then its newest checkpoint_<step> that has a
// `checkpoint` file or a state/_METADATA).
absl::StatusOr<T5xCheckpoint> ReadT5xCheckpoint(const std::string& path);

struct T5xWriteOptions {
  // The largest chunk of a stored array, in bytes: T5X's
  // _DESIRED_CHUNK_SIZE_BYTES (64 MiB).
  uint64_t chunk_bytes = uint64_t{64} << 20;
};

// Writes `checkpoint` (its step, target and state; `dir` and `version` are
// not read, version 3 is written) as `model_dir`/checkpoint_<step>, created
// with `model_dir` if need be, and returns that path. It is written as
// checkpoint_<step>.tmp-<unix seconds> (T5X's temporary name, which readers
// pass over), made durable (syncfs(2)), then renamed; nothing
// half-written is ever named checkpoint_<step>, and a failed write removes
// the temporary directory. An existing checkpoint_<step> is refused
// (kAlreadyExists), as is a step outside T5X's int32 (kInvalidArgument), or
// a leaf whose data is not its shape's size or that is both a leaf and a
// map (kInvalidArgument naming it).
absl::StatusOr<std::string> WriteT5xCheckpoint(const T5xCheckpoint& checkpoint, const std::string& model_dir,
                                               const T5xWriteOptions& options = {});

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_T5X_CHECKPOINT_H_

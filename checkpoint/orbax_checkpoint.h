// An item of an Orbax checkpoint written by Orbax's PyTreeCheckpointHandler
// (orbax-checkpoint; T5X's OrbaxCheckpointManagerInterface saves its train
// state so, as checkpoint_<step>/state), read:
//
//   _METADATA        JSON: {"tree_metadata": {"('target', 'encoder', ...)":
//                    {"key_metadata": [{"key": "target", ...}, ...],
//                    "value_metadata": {"value_type": "jax.Array", ...}}},
//                    "use_ocdbt": ..., "use_zarr3": ...}
//   manifest.ocdbt,  with OCDBT (use_ocdbt=True, T5X's choice): one OCDBT
//   d/, ocdbt.*/     database (checkpoint/ocdbt.h) holding each leaf as a
//                    zarr array under its keys joined with '.'
//                    ("target.encoder.layers_0.mlp.wi.kernel/.zarray")
//   <keys joined     without OCDBT: a zarr directory per leaf
//    with '.'>/
//
// The arrays are zarr v2 (Orbax's default; checkpoint/zarr.h: zstd, gzip,
// zlib or no compressor) or, with use_zarr3, zarr v3 (checkpoint/zarr3.h:
// Orbax's sharded chunks). Leaves whose value_type is jax.Array, np.ndarray
// or scalar are read; empty ones (None, an empty Dict, List, Tuple or
// NamedTuple) are left out. Refused, naming the file and the leaf: leaves
// kept in the msgpack aggregate file (skip_deserialize), other value types
// (strings) and a leaf name that is not a plain directory name.
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_ORBAX_CHECKPOINT_H_
#define TRAINYARD_CHECKPOINT_ORBAX_CHECKPOINT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/zarr.h"

namespace trainyard {

// Every leaf of the PyTree item in `item_dir`, by its keys joined with '/'
// ("target/encoder/layers_0/mlp/wi/kernel", "state/step").
absl::StatusOr<std::map<std::string, ZarrArray>> ReadOrbaxPyTree(const std::string& item_dir);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_ORBAX_CHECKPOINT_H_

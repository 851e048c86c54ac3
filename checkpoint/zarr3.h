// Zarr v3 arrays (what Orbax writes with use_zarr3=True): `zarr.json`
// (zarr_format 3, node_type "array", data_type, shape, a regular
// chunk_grid, chunk_key_encoding, fill_value, codecs) and one value per
// chunk ("c/0/1" with the default key encoding, "0.1" with "v2").
//
// Supported: data types float16 float32 float64 bfloat16 int32 int64;
// codecs `bytes` (either endian) followed by an optional `zstd`, or one
// `sharding_indexed` codec (Orbax's) whose inner chunks use those codecs
// and whose index (at the end or the start) uses `bytes` and an optional
// `crc32c`. A missing chunk or inner chunk is the fill value. Anything else
// (transpose, gzip, blosc, nested sharding, other types) is refused naming
// the file and the field (kInvalidArgument); a chunk or shard that does not
// decode to its size, or an index whose CRC-32C does not match, is
// kDataLoss naming the chunk.
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_ZARR3_H_
#define TRAINYARD_CHECKPOINT_ZARR3_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/zarr.h"

namespace trainyard {

// The array whose keys are below `name` ("<name>/zarr.json", ...), read
// with `read`; larger than `max_bytes` is refused (kResourceExhausted).
absl::StatusOr<ZarrArray> ReadZarr3Array(const std::string& name, const ZarrKeyReader& read,
                                         uint64_t max_bytes = uint64_t{1} << 40);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_ZARR3_H_

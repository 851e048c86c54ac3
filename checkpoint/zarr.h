// Reading zarr v2 arrays (what TensorStore writes for T5X checkpoints): a
// directory with `.zarray` (JSON: shape, chunks, dtype, compressor, order,
// fill_value, filters, dimension_separator) and one file per chunk named by
// its grid index ("0.1", or "0/1" with dimension_separator "/").
//
// Supported: dtypes <f2 <f4 <f8 bfloat16 <i4 <i8 (and their big-endian forms,
// swapped on read), compressors gzip, zlib and none, C order, no filters.
// A missing chunk is the fill value (0 when null), as zarr defines; edge
// chunks are stored whole and their out-of-bounds part ignored. Anything
// else is refused naming the file and the field (kInvalidArgument); a chunk
// that does not decompress to its size is kDataLoss naming the chunk.
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_ZARR_H_
#define TRAINYARD_CHECKPOINT_ZARR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

struct ZarrArray {
  std::string dtype;  // "float16", "float32", "float64", "bfloat16", "int32", "int64"
  std::vector<int64_t> shape;
  std::string data;  // every element, C order, little-endian
};

// Bytes per element of a ZarrArray dtype (0 for an unknown one).
int ZarrDtypeSize(const std::string& dtype);

// Reads the whole array under `dir`. Arrays larger than `max_bytes` are
// refused (kResourceExhausted) before anything is read.
absl::StatusOr<ZarrArray> ReadZarrArray(const std::string& dir, uint64_t max_bytes = uint64_t{1} << 40);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_ZARR_H_

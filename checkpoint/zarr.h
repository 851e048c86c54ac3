// Zarr v2 arrays (what TensorStore writes for T5X checkpoints): a
// directory with `.zarray` (JSON: shape, chunks, dtype, compressor, order,
// fill_value, filters, dimension_separator) and one file per chunk named by
// its grid index ("0.1", or "0/1" with dimension_separator "/").
//
// Supported: dtypes <f2 <f4 <f8 bfloat16 <i4 <i8 (and their big-endian forms,
// swapped on read), compressors gzip, zlib, zstd (Orbax's) and none, C
// order, no filters.
// A missing chunk is the fill value (0 when null), as zarr defines; edge
// chunks are stored whole and their out-of-bounds part ignored. Anything
// else is refused naming the file and the field (kInvalidArgument); a chunk
// that does not decompress to its size is kDataLoss naming the chunk.
//
// Writing: C order, little-endian (bfloat16 for bfloat16), gzip, no
// filters, fill_value null, as TensorStore's zarr driver writes them (the
// same `.zarray` text, every chunk written, edge chunks whole with the part
// outside the array zero).
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_ZARR_H_
#define TRAINYARD_CHECKPOINT_ZARR_H_

#include <cstdint>
#include <functional>
#include <optional>
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

// The value stored under a key ("<array>/.zarray", "<array>/0.0"); nullopt
// when there is none.
using ZarrKeyReader = std::function<absl::StatusOr<std::optional<std::string>>(const std::string& key)>;

// The same, the array's keys below `name` read with `read` (files of a
// directory, an OCDBT database's keys).
absl::StatusOr<ZarrArray> ReadZarrArrayFrom(const std::string& name, const ZarrKeyReader& read,
                                            uint64_t max_bytes = uint64_t{1} << 40);

// T5X's chunk shape (checkpoints.py, _choose_chunk_shape): each dimension a
// divisor of the array's, at most `target_elements` elements in all, found
// by repeatedly taking the largest dimension (the first of equal ones) down
// to its next smaller divisor. A dimension of size 0 gets a chunk of 1.
std::vector<int64_t> ChooseZarrChunks(const std::vector<int64_t>& shape, uint64_t target_elements);

// The `.zarray` text TensorStore writes for an array of `dtype` (a ZarrArray
// dtype), `shape` and `chunks`, gzip at `gzip_level`.
std::string ZarrMetadataJson(const std::string& dtype, const std::vector<int64_t>& shape,
                             const std::vector<int64_t>& chunks, int gzip_level = 1);

struct ZarrWriteOptions {
  int gzip_level = 1;  // TensorStore's default
  // Whether each file, then the directory, is fsynced. A writer of many
  // arrays may sync them together instead (syncfs(2)).
  bool sync = true;
};

// Writes `array` to `dir`, which must not exist (kAlreadyExists): `.zarray`
// and one gzip file per chunk of `chunks` (C order of the grid, "0.1";
// "0" for a scalar). kInvalidArgument for an unknown dtype, data that is
// not the shape's size, or chunks of another rank or of size 0; a failed
// write is FileError's status (durable_file.h).
absl::Status WriteZarrArray(const std::string& dir, const ZarrArray& array, const std::vector<int64_t>& chunks,
                            const ZarrWriteOptions& options = {});

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_ZARR_H_

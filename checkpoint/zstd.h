// Zstandard decompression (libzstd) for the formats that use it: Orbax's
// zarr chunks and OCDBT's manifests and nodes.
//
// Tensor-library free.
#ifndef TRAINYARD_CHECKPOINT_ZSTD_H_
#define TRAINYARD_CHECKPOINT_ZSTD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

// The frames of `in` decompressed, at most `max_bytes`. kDataLoss naming
// `what` when `in` is not zstd, is cut short or decompresses to more than
// `max_bytes`.
absl::StatusOr<std::string> ZstdDecompress(absl::string_view in, uint64_t max_bytes, const std::string& what);

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_ZSTD_H_

// CRC-32C (Castagnoli), the checksum of TFRecord files (and so of
// TensorBoard's event files), of OCDBT's manifests and nodes and of zarr
// v3's crc32c codec; and TFRecord's mask of it.
#ifndef TRAINYARD_COMMON_CRC32C_H_
#define TRAINYARD_COMMON_CRC32C_H_

#include <cstdint>
#include "absl/strings/string_view.h"

namespace trainyard {

// CRC-32C of `data`, continuing `crc` (0 to start): Crc32c(b, Crc32c(a)) ==
// Crc32c(a + b). Slicing by 8 bytes.
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

// TFRecord's masking of a CRC stored next to the data it covers.
uint32_t MaskCrc32c(uint32_t crc);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CRC32C_H_

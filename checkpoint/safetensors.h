// The safetensors file format (Hugging Face's): an 8-byte little-endian
// header length N, N bytes of JSON describing each tensor (dtype, shape,
// [begin, end) byte offsets into the data that follows) plus an optional
// "__metadata__" map of strings, then the raw little-endian data.
//
// Reading validates everything before anything is used: the header length
// against the file size, every dtype, shape and offset, that byte ranges
// match shapes, do not overlap and cover the data exactly. Errors name the
// file and the tensor. Writing goes to a temporary file that is fsynced and
// renamed, so a crash never leaves a half-written file under the final name.
//
// Tensor-library free (bytes and shapes only); model/weights.h bridges to
// LibTorch. Thread-safety: a reader is immutable after Open and may be shared.
#ifndef TRAINYARD_CHECKPOINT_SAFETENSORS_H_
#define TRAINYARD_CHECKPOINT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

enum class SafeDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", ...
const char* SafeDtypeName(SafeDtype dtype);
size_t SafeDtypeSize(SafeDtype dtype);

struct SafeTensorInfo {
  std::string name;
  SafeDtype dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // into the data section
  uint64_t size = 0;    // bytes
};

class SafetensorsReader {
 public:
  // Maps and validates `path`. kNotFound if missing; kDataLoss if the file is
  // malformed (truncated, bad header, inconsistent offsets).
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  // Sorted by name.
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  const SafeTensorInfo* Find(absl::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's bytes (valid while the reader lives).
  const uint8_t* Data(const SafeTensorInfo& info) const { return data_ + info.offset; }

 private:
  SafetensorsReader() = default;

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` holds shape's product x dtype size bytes.
struct SafeTensorView {
  std::string name;
  SafeDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// Writes atomically (temporary file, fsync, rename, fsync of the directory).
// kInvalidArgument for duplicate or empty names; kInternal for I/O errors.
absl::Status WriteSafetensors(const std::string& path, const std::vector<SafeTensorView>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_SAFETENSORS_H_

#include "model/parameter_storage.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// The bytes of storage t reads: its offset and its furthest element.
size_t BytesCovered(const torch::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
  return static_cast<size_t>(t.storage_offset() + extent) * t.element_size();
}

}  // namespace

size_t ReleaseStorage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = storage->nbytes();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  return nbytes;
}

absl::Status RestoreStorage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (!StorageReleased(t)) {
    return absl::FailedPreconditionError(
        absl::StrCat("restoring a storage that holds ", storage->nbytes(), " bytes; only a released one is restored"));
  }
  if (storage->allocator() == nullptr) {
    return absl::FailedPreconditionError("restoring a storage without an allocator (memory the tensor does not own)");
  }
  const size_t covered = BytesCovered(t);
  if (nbytes < covered) {
    return absl::InvalidArgumentError(
        absl::StrCat("restoring ", nbytes, " bytes for a tensor that reads ", covered, " bytes of its storage"));
  }
  // The allocator serves the current device (CUDA's caching allocator).
  const c10::DeviceGuard on_device(storage->device());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
  return absl::OkStatus();
}

bool StorageReleased(const torch::Tensor& t) {
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  return storage->nbytes() == 0 && storage->data() == nullptr;
}

}  // namespace trainyard

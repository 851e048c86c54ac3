#include "model/parameter_storage.h"

#include <c10/core/StorageImpl.h>

#include <utility>

namespace trainyard {

size_t ReleaseStorage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = storage->nbytes();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  return nbytes;
}

void RestoreStorage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

bool StorageReleased(const torch::Tensor& t) {
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  return storage->nbytes() == 0 && storage->data() == nullptr;
}

}  // namespace trainyard

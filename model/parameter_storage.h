// Releasing and restoring the memory behind a tensor while the tensor, its
// views and the references autograd saved of it stay the same objects:
// fully sharded training (data_parallel.sharding PARAMETERS) frees the
// parameters a rank does not own between their uses and gathers them into
// the same storage again, so a backward pass that saved a parameter in
// forward reads the re-gathered values.
#ifndef TRAINYARD_MODEL_PARAMETER_STORAGE_H_
#define TRAINYARD_MODEL_PARAMETER_STORAGE_H_

#include <cstddef>

#include <torch/types.h>

namespace trainyard {

// Frees the memory of t's storage (shared by every view of it) and returns
// its size in bytes. The tensor keeps its sizes; nothing may read it until
// RestoreStorage. Releasing a released storage returns 0.
size_t ReleaseStorage(const torch::Tensor& t);

// Gives t's released storage `nbytes` of fresh memory from its allocator
// (contents undefined: the caller fills it).
void RestoreStorage(const torch::Tensor& t, size_t nbytes);

// Whether t's storage holds no memory.
bool StorageReleased(const torch::Tensor& t);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_PARAMETER_STORAGE_H_

// Releasing and restoring the memory behind a tensor while the tensor, its
// views and the references autograd saved of it stay the same objects:
// fully sharded training (data_parallel.sharding PARAMETERS) frees the
// parameters a rank does not own between their uses and gathers them into
// the same storage again, so a backward pass that saved a parameter in
// forward reads the re-gathered values.
//
// Refill a restored tensor without bumping its version counter (through
// `t.data()`, or its data pointer): autograd takes a bumped counter for an
// in-place change of a saved tensor and fails the backward pass.
#ifndef TRAINYARD_MODEL_PARAMETER_STORAGE_H_
#define TRAINYARD_MODEL_PARAMETER_STORAGE_H_

#include <cstddef>

#include <torch/types.h>

#include "absl/status/status.h"

namespace trainyard {

// Frees the memory of t's storage, and so of every tensor that shares it,
// and returns its size in bytes. The tensor keeps its sizes; nothing may
// read it until RestoreStorage. Releasing a released storage returns 0.
size_t ReleaseStorage(const torch::Tensor& t);

// Gives t's released storage `nbytes` of fresh memory from its allocator,
// on its device (contents undefined: the caller fills it).
// kFailedPrecondition if the storage holds memory or has no allocator;
// kInvalidArgument if nbytes does not cover t.
absl::Status RestoreStorage(const torch::Tensor& t, size_t nbytes);

// Whether t's storage holds no memory.
bool StorageReleased(const torch::Tensor& t);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_PARAMETER_STORAGE_H_

// Many tensors moved by a few collective operations: the tensors of each
// dtype, in order (dtypes in a fixed order), packed into flat buffers of at
// most a limit of bytes. Gloo's all-reduce and the ELASTIC state broadcast
// share it, so every rank cuts the same tensors into the same buckets.
#ifndef TRAINYARD_COLLECTIVE_FLAT_BUCKETS_H_
#define TRAINYARD_COLLECTIVE_FLAT_BUCKETS_H_

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace trainyard {

struct FlatBucket {
  // What the collective operation moves: one flat tensor of one dtype.
  torch::Tensor flat;
  // The tensors packed into `flat`, in order, copied back by Unpack. Empty
  // when `flat` is a view of the caller's tensor (a lone contiguous tensor,
  // or a bucket-sized slice of a large one): the operation works in place.
  std::vector<torch::Tensor> members;
};

// Cuts `tensors` into buckets of at most `limit_bytes` (> 0): per dtype (in
// the order of the ScalarType enum), consecutive tensors are packed together
// until the next would pass the limit. A contiguous tensor of at least the
// limit becomes views of `limit_bytes` each (never copied); a lone
// contiguous tensor in a bucket is not copied either. The same tensors
// (dtypes, sizes, order) give the same buckets on every rank.
std::vector<FlatBucket> PackFlatBuckets(const std::vector<torch::Tensor>& tensors, int64_t limit_bytes);

// Copies a bucket's flat buffer back into its members (nothing for a view).
void UnpackFlatBucket(const FlatBucket& bucket);

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_FLAT_BUCKETS_H_

#include "collective/flat_buckets.h"

#include <algorithm>
#include <map>

namespace trainyard {

std::vector<FlatBucket> PackFlatBuckets(const std::vector<torch::Tensor>& tensors, int64_t limit_bytes) {
  std::vector<FlatBucket> buckets;
  const int64_t limit = std::max<int64_t>(limit_bytes, 1);
  std::map<c10::ScalarType, std::vector<const torch::Tensor*>> by_type;
  for (const torch::Tensor& t : tensors) by_type[t.scalar_type()].push_back(&t);
  for (auto& [type, group] : by_type) {
    std::vector<torch::Tensor> pending;
    int64_t pending_bytes = 0;
    auto flush = [&] {
      if (pending.empty()) return;
      FlatBucket b;
      if (pending.size() == 1 && pending[0].is_contiguous()) {
        b.flat = pending[0].view({-1});
      } else {
        std::vector<torch::Tensor> parts;
        parts.reserve(pending.size());
        for (const torch::Tensor& t : pending) parts.push_back(t.reshape({-1}));
        b.flat = torch::cat(parts);
        b.members = std::move(pending);
      }
      buckets.push_back(std::move(b));
      pending.clear();
      pending_bytes = 0;
    };
    for (const torch::Tensor* t : group) {
      const int64_t bytes = static_cast<int64_t>(t->nbytes());
      if (bytes >= limit && t->is_contiguous()) {
        flush();
        const torch::Tensor flat = t->view({-1});
        const int64_t per = std::max<int64_t>(limit / static_cast<int64_t>(t->element_size()), 1);
        for (int64_t offset = 0; offset < flat.numel(); offset += per) {
          FlatBucket b;
          b.flat = flat.narrow(0, offset, std::min(per, flat.numel() - offset));
          buckets.push_back(std::move(b));
        }
        continue;
      }
      if (pending_bytes + bytes > limit) flush();
      pending.push_back(*t);
      pending_bytes += bytes;
    }
    flush();
  }
  return buckets;
}

void UnpackFlatBucket(const FlatBucket& bucket) {
  int64_t offset = 0;
  for (const torch::Tensor& t : bucket.members) {
    const int64_t n = t.numel();
    const_cast<torch::Tensor&>(t).copy_(bucket.flat.narrow(0, offset, n).view(t.sizes()));
    offset += n;
  }
}

}  // namespace trainyard

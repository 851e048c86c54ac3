#include "job/shard_plan.h"

#include "trainer/sharded_optimizer.h"

namespace trainyard {

ShardPlan ShardPlan::Make(const NamedTensors& params, int world_size, int rank) {
  ShardPlan plan;
  plan.bounds_ = ShardBoundaries(params, world_size);
  for (size_t i = plan.bounds_[rank]; i < plan.bounds_[rank + 1]; ++i) plan.own_.insert(params[i].first);
  return plan;
}

std::function<bool(const std::string&)> ShardPlan::OwnFilter() const {
  if (!sharded()) return nullptr;
  return [own = own_](const std::string& name) { return own.count(name) > 0; };
}

}  // namespace trainyard

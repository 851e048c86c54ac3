// Which parameters this rank owns when the training state is sharded
// (data_parallel.sharding): contiguous runs of whole parameters in the
// model's order (ShardBoundaries), worked out once per job and used where
// the model is built (PARAMETERS: a rank builds its own only), restored and
// saved.
#ifndef TRAINYARD_JOB_SHARD_PLAN_H_
#define TRAINYARD_JOB_SHARD_PLAN_H_

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "trainer/optimizer.h"

namespace trainyard {

class ShardPlan {
 public:
  // Unsharded: every rank owns every parameter.
  ShardPlan() = default;
  // `params` in the model's order (shapes suffice: a model on the meta
  // device), cut for `world_size` ranks and seen from `rank`.
  static ShardPlan Make(const NamedTensors& params, int world_size, int rank);

  bool sharded() const { return !bounds_.empty(); }
  // world_size + 1 parameter indices (ShardBoundaries); empty unsharded.
  const std::vector<size_t>& bounds() const { return bounds_; }
  bool Owns(const std::string& name) const { return !sharded() || own_.count(name) > 0; }
  // Owns as a filter (a copy of the plan's names); null unsharded, which
  // readers and writers take as "every parameter".
  std::function<bool(const std::string&)> OwnFilter() const;

 private:
  std::vector<size_t> bounds_;
  std::set<std::string> own_;
};

}  // namespace trainyard

#endif  // TRAINYARD_JOB_SHARD_PLAN_H_

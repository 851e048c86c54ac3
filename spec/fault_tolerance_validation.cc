// Validation of fault_tolerance (internal to spec/): the mode, and where
// ELASTIC applies (training on 2 or more workers, replicated or in 2 or
// more shard groups) with its min_workers.
#include "spec/fault_tolerance_validation.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "spec/jobspec.h"

namespace trainyard {
namespace spec_internal {

void ValidateFaultTolerance(Errors* errors, JobSpec* spec, bool training) {
  FaultToleranceConfig* ft = spec->mutable_fault_tolerance();
  if (!FaultToleranceConfig::Mode_IsValid(ft->mode())) {
    errors->Add("fault_tolerance.mode", absl::StrCat(ft->mode(), " is not a mode; RESTART or ELASTIC"));
    return;
  }
  if (ft->mode() == FaultToleranceConfig::MODE_UNSPECIFIED) ft->set_mode(FaultToleranceConfig::RESTART);
  if (ft->mode() != FaultToleranceConfig::ELASTIC) {
    if (ft->min_workers() != 0) {
      errors->Add("fault_tolerance.min_workers",
                  absl::StrCat(ft->min_workers(),
                               " is set with mode RESTART, where a lost worker always restarts "
                               "the attempt; it applies to ELASTIC"));
    }
    return;
  }
  if (!training) {
    errors->Add("fault_tolerance.mode", absl::StrCat("ELASTIC with kind ", JobKind_Name(spec->kind()),
                                                     "; it applies to training kinds (TRAIN, PRETRAINING, "
                                                     "FINETUNING), which have a training state to carry on"));
  }
  if (spec->num_workers() < 2) {
    errors->Add("fault_tolerance.mode",
                absl::StrCat("ELASTIC with num_workers ", spec->num_workers(), "; it needs 2 or more workers"));
  }
  // Sharded: a lost rank's shard must exist in another shard group.
  const DataParallelConfig& dp = spec->data_parallel();
  const int group = ShardGroupSize(*spec, spec->num_workers());
  if (dp.sharding() != DataParallelConfig::NONE && group >= spec->num_workers()) {
    errors->Add("fault_tolerance.mode",
                absl::StrCat("ELASTIC with data_parallel.sharding ", DataParallelConfig::Sharding_Name(dp.sharding()),
                             " over ", dp.shard_group_size() == 0 ? "every worker" : absl::StrCat(group, " workers"),
                             ": a lost rank's shard of the state would exist on no other rank; set "
                             "data_parallel.shard_group_size to a divisor of num_workers ",
                             spec->num_workers(),
                             " below it (hybrid sharding: a lost rank's group leaves, the other groups hold its "
                             "shard), use sharding NONE, or mode RESTART"));
  }
  if (ft->min_workers() == 0) ft->set_min_workers(group);
  CheckIntRange(errors, "fault_tolerance.min_workers", ft->min_workers(), 1, std::max(spec->num_workers(), 1));
  if (ft->min_workers() % group != 0) {
    errors->Add("fault_tolerance.min_workers",
                absl::StrCat(ft->min_workers(), " is not a multiple of data_parallel.shard_group_size ", group,
                             ": hybrid-sharded ELASTIC ranks leave and join in whole shard groups"));
  }
}

}  // namespace spec_internal
}  // namespace trainyard

#include "coordinator/scheduler.h"

#include <algorithm>

namespace trainyard {

std::vector<GangAssignment> AssignGangs(const std::vector<PendingJob>& pending,
                                        const std::vector<std::string>& idle_workers) {
  std::vector<GangAssignment> out;
  size_t next = 0;
  for (const PendingJob& job : pending) {
    const size_t need = static_cast<size_t>(std::max(job.num_workers, 1));
    if (idle_workers.size() - next < need) break;  // oldest first: no backfill
    GangAssignment gang;
    gang.job_id = job.job_id;
    gang.worker_ids.assign(idle_workers.begin() + next, idle_workers.begin() + next + need);
    next += need;
    out.push_back(std::move(gang));
  }
  return out;
}

int64_t NextChunk(int64_t step, const ChunkPeriods& periods) {
  int64_t end = periods.total_steps;
  for (int64_t period : {periods.summary_period, periods.eval_period, periods.checkpoint_period}) {
    if (period > 0) end = std::min(end, (step / period + 1) * period);
  }
  return std::max<int64_t>(end - step, 1);
}

}  // namespace trainyard

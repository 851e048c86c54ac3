// The coordinator's pure scheduling decisions, free of I/O so that tests
// drive them directly:
//
// - AssignGangs: which pending jobs start now, on which idle workers. Jobs
//   are served strictly oldest first: a job that needs more workers than are
//   idle blocks the younger jobs behind it (no backfilling), so a large job
//   is never starved by a stream of small ones. Several jobs run at once on
//   disjoint gangs. Within a gang, ranks follow the workers' registration
//   order (stable across runs of a test).
// - NextChunk: how many steps the next RunSteps covers: up to the next
//   summary, eval or checkpoint boundary, so that control messages cost one
//   round trip per summary period rather than per step.
#ifndef TRAINYARD_COORDINATOR_SCHEDULER_H_
#define TRAINYARD_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard {

struct PendingJob {
  std::string job_id;
  int num_workers = 1;
};

struct GangAssignment {
  std::string job_id;
  std::vector<std::string> worker_ids;  // index = rank
};

// `pending` oldest first; `idle_workers` in registration order.
std::vector<GangAssignment> AssignGangs(const std::vector<PendingJob>& pending,
                                        const std::vector<std::string>& idle_workers);

struct ChunkPeriods {
  int64_t total_steps = 0;
  int64_t summary_period = 0;     // 0 = only at the end
  int64_t eval_period = 0;        // 0 = none
  int64_t checkpoint_period = 0;  // 0 = only at the end
};

// Steps to run from `step` (>= 0, < total_steps) to the nearest boundary:
// a multiple of a non-zero period, or total_steps.
int64_t NextChunk(int64_t step, const ChunkPeriods& periods);

// Whether `step` ends a period (a non-zero period dividing it).
inline bool AtBoundary(int64_t step, int64_t period) { return period > 0 && step % period == 0; }

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_SCHEDULER_H_

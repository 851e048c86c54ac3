// How the CLI shows jobs: JSON (status/list --json), a human summary, and
// the live progress display of `watch` and `local`.
#ifndef TRAINYARD_CLIENT_JOB_FORMAT_H_
#define TRAINYARD_CLIENT_JOB_FORMAT_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/job_client.h"
#include "nlohmann/json.hpp"
#include "proto/job_service.pb.h"

namespace trainyard {

// job_id, name, state, step, total_steps, restarts, reason, metrics,
// metrics_step, latest_checkpoint, output_dir, num_workers, ranks[],
// create/update times.
nlohmann::json JobJson(const JobInfo& job);
std::string FormatJob(const JobInfo& job);

// The ranks that slow the gang down, by their last chunk. With compute
// times reported: a rank whose compute seconds per step exceed the median
// of the other ranks' by more than 25 % (and 5 ms, against noise). Waiting
// in collectives does not count: ranks in lock-step have equal wall times,
// and the one the others wait for has the most compute. Without them (a
// worker that does not report it): a rank whose wall seconds per step
// exceed the fastest rank's by more than 20 %.
std::vector<int> Stragglers(const JobInfo& job);

// Goodput's buckets other than productive, largest first, as
// "recovery 4.1 s" (at most `n`, none under 0.05 s).
std::vector<std::string> GoodputLosses(const Goodput& goodput, int n);

// "[#####-----] 120/300  4.1 steps/s  ETA 0:44  loss 1.234"; rate < 0 when
// not known yet.
std::string ProgressLine(const JobInfo& job, double steps_per_second);

// Watches until the job ends; `tty` redraws one progress line in place,
// otherwise one line per state change or summary. Returns the exit code:
// 0 if the job succeeded, 1 otherwise.
int WatchUntilDone(JobClient* client, const std::string& job_id, std::ostream& out, std::ostream& err, bool tty);

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_JOB_FORMAT_H_

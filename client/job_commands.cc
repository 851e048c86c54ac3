// The job commands: submit, status, list, watch, cancel (a JobService
// client each).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/job_client.h"
#include "client/job_format.h"
#include "common/jobspec.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

int Fail(std::ostream& err, const absl::Status& status) {
  err << "error: " << status.message() << "\n";
  return absl::IsInvalidArgument(status) ? kExitUsage : kExitFailed;
}

}  // namespace

int RunSubmit(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator;
  std::vector<std::string> overrides;
  bool watch = false;
  FlagSet flags("submit --coordinator HOST:PORT SPEC [--set path=value]... [--watch]",
                "Submits a job spec to a coordinator; prints the job id. The coordinator\n"
                "validates the spec (with the overrides applied) and queues the job.");
  flags.AddString("coordinator", &coordinator, "HOST:PORT", "the coordinator (default: $TRAINYARD_COORDINATOR)");
  flags.AddRepeated("set", &overrides, "PATH=VALUE", "override a field of the spec");
  flags.AddBool("watch", &watch, "then watch the job until it ends (exit 0 only if it succeeds)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (positional.size() != 1) {
    err << "error: want exactly one SPEC file\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> address = CoordinatorAddress(coordinator);
  if (!address.ok()) return Fail(err, address.status());
  absl::StatusOr<JobSpec> spec = LoadJobSpec(positional[0]);
  if (!spec.ok()) return Fail(err, spec.status());
  JobClient client(*address);
  absl::StatusOr<SubmitJobResponse> submitted = client.Submit(*spec, overrides);
  if (!submitted.ok()) return Fail(err, submitted.status());
  out << submitted->job_id() << std::endl;
  if (!watch) return kExitOk;
  return WatchUntilDone(&client, submitted->job_id(), out, err, &out == &std::cout && isatty(STDOUT_FILENO));
}

int RunStatus(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator;
  bool json = false;
  FlagSet flags("status --coordinator HOST:PORT JOB [--json]",
                "A job's state, step, latest metrics and its ranks (with each rank's\n"
                "seconds per step, so that stragglers stand out).");
  flags.AddString("coordinator", &coordinator, "HOST:PORT", "the coordinator (default: $TRAINYARD_COORDINATOR)");
  flags.AddBool("json", &json, "print JSON");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (positional.size() != 1) {
    err << "error: want exactly one JOB id\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> address = CoordinatorAddress(coordinator);
  if (!address.ok()) return Fail(err, address.status());
  JobClient client(*address);
  absl::StatusOr<JobInfo> job = client.Get(positional[0]);
  if (!job.ok()) return Fail(err, job.status());
  if (json) {
    out << JobJson(*job).dump(2) << "\n";
  } else {
    out << FormatJob(*job);
  }
  return kExitOk;
}

int RunList(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator;
  bool json = false;
  int limit = 0;
  FlagSet flags("list --coordinator HOST:PORT [--limit N] [--json]", "Jobs, newest first.");
  flags.AddString("coordinator", &coordinator, "HOST:PORT", "the coordinator (default: $TRAINYARD_COORDINATOR)");
  flags.AddInt("limit", &limit, "N", "at most N jobs (0 = all)");
  flags.AddBool("json", &json, "print JSON");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (!positional.empty()) {
    err << "error: list takes no arguments\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> address = CoordinatorAddress(coordinator);
  if (!address.ok()) return Fail(err, address.status());
  JobClient client(*address);
  absl::StatusOr<std::vector<JobInfo>> jobs = client.List(limit);
  if (!jobs.ok()) return Fail(err, jobs.status());
  if (json) {
    nlohmann::json all = nlohmann::json::array();
    for (const JobInfo& job : *jobs) all.push_back(JobJson(job));
    out << all.dump(2) << "\n";
    return kExitOk;
  }
  out << absl::StrFormat("%-32s %-10s %13s %7s  %s\n", "JOB", "STATE", "STEP", "WORKERS", "REASON");
  for (const JobInfo& job : *jobs) {
    out << absl::StrFormat("%-32s %-10s %13s %7d  %s\n", job.job_id(), JobState_Name(job.state()),
                           absl::StrCat(job.step(), "/", job.spec().total_steps()), job.spec().num_workers(),
                           job.reason());
  }
  return kExitOk;
}

int RunWatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator;
  FlagSet flags("watch --coordinator HOST:PORT JOB",
                "Follows a job until it ends: a progress bar (step/total, steps/s, ETA,\n"
                "loss) on a terminal, one line per summary otherwise. Exits 0 if the job\n"
                "succeeds, 1 if it fails or is cancelled.");
  flags.AddString("coordinator", &coordinator, "HOST:PORT", "the coordinator (default: $TRAINYARD_COORDINATOR)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (positional.size() != 1) {
    err << "error: want exactly one JOB id\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> address = CoordinatorAddress(coordinator);
  if (!address.ok()) return Fail(err, address.status());
  JobClient client(*address);
  return WatchUntilDone(&client, positional[0], out, err, &out == &std::cout && isatty(STDOUT_FILENO));
}

int RunCancel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string coordinator, reason;
  FlagSet flags("cancel --coordinator HOST:PORT JOB [--reason TEXT]",
                "Cancels a job: queued jobs leave the queue, running jobs stop at the next\n"
                "step boundary and their workers return to the pool.");
  flags.AddString("coordinator", &coordinator, "HOST:PORT", "the coordinator (default: $TRAINYARD_COORDINATOR)");
  flags.AddString("reason", &reason, "TEXT", "recorded as the job's reason");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (positional.size() != 1) {
    err << "error: want exactly one JOB id\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> address = CoordinatorAddress(coordinator);
  if (!address.ok()) return Fail(err, address.status());
  JobClient client(*address);
  absl::StatusOr<JobInfo> job = client.Cancel(positional[0], reason);
  if (!job.ok()) return Fail(err, job.status());
  out << job->job_id() << ": " << JobState_Name(job->state())
      << (job->state() == CANCELLED ? "" : " (stopping at the next step boundary)") << "\n";
  return kExitOk;
}

}  // namespace trainyard

// The job commands: submit, status, list, watch, cancel (a JobService
// client each).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/job_client.h"
#include "client/job_format.h"
#include "nlohmann/json.hpp"
#include "spec/jobspec.h"

namespace trainyard {
namespace {

int Fail(std::ostream& err, const absl::Status& status) {
  err << "error: " << status.message() << "\n";
  return absl::IsInvalidArgument(status) ? kExitUsage : kExitFailed;
}

// The shape every job command shares: a --coordinator flag, a fixed number
// of positional arguments, then a JobService client.
class JobCommand {
 public:
  JobCommand(const std::string& usage, const std::string& description) : flags_(usage, description) {
    flags_.AddString("coordinator", &coordinator_, "HOST:PORT", "the coordinator (default: $TRAINYARD_COORDINATOR)");
  }
  FlagSet& flags() { return flags_; }

  // An exit code to return at once (help, bad usage), or nullopt with the
  // client ready. `what` names the positional arguments in the message.
  absl::optional<int> Parse(const std::vector<std::string>& args, size_t want, const char* what, std::ostream& out,
                            std::ostream& err) {
    if (absl::optional<int> code = flags_.ParseCommand(args, &positional_, out, err)) return code;
    if (positional_.size() != want) {
      err << "error: want " << what << "\n";
      return kExitUsage;
    }
    absl::StatusOr<std::string> address = CoordinatorAddress(coordinator_);
    if (!address.ok()) return Fail(err, address.status());
    client_ = std::make_unique<JobClient>(*address);
    return absl::nullopt;
  }
  const std::string& arg(size_t i) const { return positional_[i]; }
  JobClient* client() { return client_.get(); }

 private:
  FlagSet flags_;
  std::string coordinator_;
  std::vector<std::string> positional_;
  std::unique_ptr<JobClient> client_;
};

bool IsTerminal(const std::ostream& out) { return &out == &std::cout && isatty(STDOUT_FILENO); }

}  // namespace

int RunSubmit(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> overrides;
  bool watch = false;
  JobCommand command("submit --coordinator HOST:PORT SPEC [--set path=value]... [--watch]",
                     "Submits a job spec to a coordinator; prints the job id. The coordinator\n"
                     "validates the spec (with the overrides applied) and queues the job.");
  command.flags().AddRepeated("set", &overrides, "PATH=VALUE", "override a field of the spec");
  command.flags().AddBool("watch", &watch, "then watch the job until it ends (exit 0 only if it succeeds)");
  if (absl::optional<int> code = command.Parse(args, 1, "exactly one SPEC file", out, err)) return *code;
  absl::StatusOr<JobSpec> spec = LoadJobSpec(command.arg(0));
  if (!spec.ok()) return Fail(err, spec.status());
  absl::StatusOr<SubmitJobResponse> submitted = command.client()->Submit(*spec, overrides);
  if (!submitted.ok()) return Fail(err, submitted.status());
  out << submitted->job_id() << std::endl;
  if (!watch) return kExitOk;
  return WatchUntilDone(command.client(), submitted->job_id(), out, err, IsTerminal(out));
}

int RunStatus(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  bool json = false;
  JobCommand command("status --coordinator HOST:PORT JOB [--json]",
                     "A job's state, step, latest metrics and its ranks: each rank's seconds\n"
                     "per step, split into compute and time blocked in collectives; a rank\n"
                     "whose compute is well above the others' is marked (straggler).");
  command.flags().AddBool("json", &json, "print JSON");
  if (absl::optional<int> code = command.Parse(args, 1, "exactly one JOB id", out, err)) return *code;
  absl::StatusOr<JobInfo> job = command.client()->Get(command.arg(0));
  if (!job.ok()) return Fail(err, job.status());
  out << (json ? JobJson(*job).dump(2) + "\n" : FormatJob(*job));
  return kExitOk;
}

int RunList(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  bool json = false;
  int limit = 0;
  JobCommand command("list --coordinator HOST:PORT [--limit N] [--json]", "Jobs, newest first.");
  command.flags().AddInt("limit", &limit, "N", "at most N jobs (0 = all)");
  command.flags().AddBool("json", &json, "print JSON");
  if (absl::optional<int> code = command.Parse(args, 0, "no arguments", out, err)) return *code;
  absl::StatusOr<std::vector<JobInfo>> jobs = command.client()->List(limit);
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
  JobCommand command("watch --coordinator HOST:PORT JOB",
                     "Follows a job until it ends: a progress bar (step/total, steps/s, ETA,\n"
                     "loss) on a terminal, one line per summary otherwise. Exits 0 if the job\n"
                     "succeeds, 1 if it fails or is cancelled.");
  if (absl::optional<int> code = command.Parse(args, 1, "exactly one JOB id", out, err)) return *code;
  return WatchUntilDone(command.client(), command.arg(0), out, err, IsTerminal(out));
}

int RunCheckpoint(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int timeout = 600;
  JobCommand command("checkpoint --coordinator HOST:PORT JOB [--timeout SECONDS]",
                     "Makes a running training job write a checkpoint at its next boundary\n"
                     "between chunks of steps (at most a summary period away) and prints its\n"
                     "path once it is durable.");
  command.flags().AddInt("timeout", &timeout, "SECONDS", "how long to wait for it (default 600, 1..86400)");
  if (absl::optional<int> code = command.Parse(args, 1, "exactly one JOB id", out, err)) return *code;
  if (timeout < 1 || timeout > 86400) {
    err << "error: --timeout: " << timeout << "; allowed 1..86400\n";
    return kExitUsage;
  }
  absl::StatusOr<CheckpointJobResponse> saved = command.client()->Checkpoint(command.arg(0), absl::Seconds(timeout));
  if (!saved.ok()) return Fail(err, saved.status());
  out << saved->path() << "\n";
  return kExitOk;
}

int RunCancel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string reason;
  JobCommand command("cancel --coordinator HOST:PORT JOB [--reason TEXT]",
                     "Cancels a job: queued jobs leave the queue, running jobs stop at the next\n"
                     "step boundary and their workers return to the pool.");
  command.flags().AddString("reason", &reason, "TEXT", "recorded as the job's reason");
  if (absl::optional<int> code = command.Parse(args, 1, "exactly one JOB id", out, err)) return *code;
  absl::StatusOr<JobInfo> job = command.client()->Cancel(command.arg(0), reason);
  if (!job.ok()) return Fail(err, job.status());
  out << job->job_id() << ": " << JobState_Name(job->state())
      << (job->state() == CANCELLED ? "" : " (stopping at the next step boundary)") << "\n";
  return kExitOk;
}

}  // namespace trainyard

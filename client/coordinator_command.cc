// `trainyard coordinator`: runs the coordinator process.
#include <unistd.h>

#include <climits>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/logging.h"
#include "coordinator/server.h"

namespace trainyard {

namespace {

// The coordinator's timing flags, as given.
struct TimeFlags {
  int heartbeat_timeout = 10;
  int adopt_grace = 30;
  std::string watchdog_period = "1", watchdog_stall = "3", watchdog_elastic_stall = "0.5";
};

// --heartbeat-timeout, --adopt-grace, --watchdog-period, --watchdog-stall,
// --watchdog-elastic-stall, checked, into `options`.
absl::Status SetTimes(const TimeFlags& t, CoordinatorOptions* options) {
  if (t.heartbeat_timeout < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heartbeat-timeout: ", t.heartbeat_timeout, "; want at least 1 second"));
  }
  if (t.adopt_grace < 0 || t.adopt_grace > 3600) {
    return absl::InvalidArgumentError(absl::StrCat("--adopt-grace: ", t.adopt_grace, "; want seconds in [0, 3600]"));
  }
  double period = 0, stall = 0, elastic_stall = 0;
  if (!absl::SimpleAtod(t.watchdog_period, &period) || !(period >= 0 && period <= 60)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--watchdog-period: '", t.watchdog_period, "'; want seconds in [0, 60]"));
  }
  if (!absl::SimpleAtod(t.watchdog_stall, &stall) || !(stall >= 1 && stall <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--watchdog-stall: '", t.watchdog_stall, "'; want seconds in [1, 3600]"));
  }
  if (!absl::SimpleAtod(t.watchdog_elastic_stall, &elastic_stall) ||
      !(elastic_stall >= 0.1 && elastic_stall <= stall)) {
    return absl::InvalidArgumentError(absl::StrCat("--watchdog-elastic-stall: '", t.watchdog_elastic_stall,
                                                   "'; want seconds in [0.1, --watchdog-stall]"));
  }
  options->heartbeat_timeout = absl::Seconds(t.heartbeat_timeout);
  options->adopt_grace = absl::Seconds(t.adopt_grace);
  options->watchdog.period = absl::Seconds(period);
  options->watchdog.stall = absl::Seconds(stall);
  options->watchdog.elastic_stall = absl::Seconds(elastic_stall);
  return absl::OkStatus();
}

// --submit-rate: per client and second, bursts of twice that.
absl::Status SetSubmitRate(const std::string& submit_rate, CoordinatorServerOptions* options) {
  if (!absl::SimpleAtod(submit_rate, &options->submit_rate) || options->submit_rate < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--submit-rate: '", submit_rate, "'; want a number >= 0"));
  }
  options->submit_burst = std::max(1.0, 2 * options->submit_rate);
  return absl::OkStatus();
}

absl::Status SetRetention(int keep_finished_jobs, const std::string& keep_finished_for, CoordinatorOptions* options) {
  if (keep_finished_jobs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keep-finished-jobs: ", keep_finished_jobs, "; want N >= 0 (0: no limit)"));
  }
  absl::Duration keep_for;
  if (!absl::ParseDuration(keep_finished_for, &keep_for) || keep_for < absl::ZeroDuration() ||
      keep_for == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--keep-finished-for: '", keep_finished_for,
                                                   "'; want a duration such as 90m, 72h or 0 (no limit)"));
  }
  options->keep_finished_jobs = keep_finished_jobs;
  options->keep_finished_for = keep_for;
  return absl::OkStatus();
}

// --output-root, the current directory without it; it must be absolute.
absl::StatusOr<std::string> AbsoluteOutputRoot(std::string output_root) {
  if (output_root.empty()) {
    char cwd[PATH_MAX] = {};
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::FailedPreconditionError("cannot read the current directory; give --output-root");
    }
    output_root = cwd;
  }
  if (output_root[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("--output-root: '", output_root, "'; want an absolute path"));
  }
  return output_root;
}

}  // namespace

int RunCoordinator(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CoordinatorServerOptions options;
  std::string output_root, log_level = "info";
  TimeFlags times;
  FlagSet flags("coordinator --listen HOST:PORT --state-dir DIR [--output-root DIR]",
                "Runs the coordinator: the public JobService and the workers' internal\n"
                "service on one port. Port 0 lets the OS choose; the first line on stdout\n"
                "is `listening on HOST:PORT` with the real port. Jobs are kept in\n"
                "DIR/jobs.db (SQLite). SIGTERM or SIGINT stops it cleanly.");
  flags.AddString("listen", &options.listen, "HOST:PORT", "where to serve (default 127.0.0.1:0)");
  flags.AddString("state-dir", &options.coordinator.state_dir, "DIR", "where the job database lives (required)");
  flags.AddString("output-root", &output_root, "DIR",
                  "jobs' output_dir must lie inside it; a relative one is taken under it (default: the "
                  "current directory)");
  flags.AddInt("heartbeat-timeout", &times.heartbeat_timeout, "SECONDS",
               "a worker silent for longer is dropped and its job fails (default 10)");
  flags.AddString("watchdog-period", &times.watchdog_period, "SECONDS",
                  "how often the ranks of a running training call are probed for a stopped rank or a\n"
                  "link cut between ranks (default 1; 0: off: only heartbeats and --collective-timeout\n"
                  "find them)");
  flags.AddString("watchdog-stall", &times.watchdog_stall, "SECONDS",
                  "the ranks must have been blocked in a collective this long before the watchdog acts\n"
                  "(default 3; below --heartbeat-timeout)");
  flags.AddString("watchdog-elastic-stall", &times.watchdog_elastic_stall, "SECONDS",
                  "the same for an ELASTIC job, where a false drop costs a regroup, not a restart;\n"
                  "its rounds come every half of it, each probe due within it (at most\n"
                  "--watchdog-period and 1 s); at 0.5 training goes on 1.2 to 1.7 s after a hang\n"
                  "(default 0.5; in [0.1, --watchdog-stall])");
  flags.AddInt("adopt-grace", &times.adopt_grace, "SECONDS",
               "after a restart, how long to wait for the ranks of each job that was running to\n"
               "register again and take the job over where they are (default 30; 0: restart such\n"
               "jobs from their newest checkpoint at once)");
  flags.AddString("log-level", &log_level, "LEVEL", "trace, debug, info, warn, error (default info)");
  AddTlsFlags(&flags, &options.tls, &options.insecure);
  flags.AddString("auth-tokens", &options.auth_tokens_file, "FILE",
                  "`NAME TOKEN` lines: JobService calls must carry one of these bearer tokens\n"
                  "(clients: TRAINYARD_TOKEN or TRAINYARD_TOKEN_FILE); default: no token check");
  std::string submit_rate = "20";
  flags.AddString("submit-rate", &submit_rate, "N",
                  "job submissions per client and second, bursts of twice that (default 20; 0: unlimited)");
  flags.AddInt("max-message-bytes", &options.max_message_bytes, "N", "largest request accepted (default 16777216)");
  flags.AddString("metrics-listen", &options.metrics_listen, "HOST:PORT",
                  "serve Prometheus /metrics and /healthz over HTTP there (default: off)");
  int keep_finished_jobs = 10000;
  std::string keep_finished_for = "0";
  flags.AddInt("keep-finished-jobs", &keep_finished_jobs, "N",
               "keep the records of the newest N finished jobs; older ones are deleted\n"
               "(memory and jobs.db; default 10000; 0: no limit by count)");
  flags.AddString("keep-finished-for", &keep_finished_for, "DURATION",
                  "delete a finished job's record this long after it finished, e.g. 72h\n"
                  "(default 0: no limit by age)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (!positional.empty() || options.coordinator.state_dir.empty()) {
    err << "error: want: trainyard coordinator --listen HOST:PORT --state-dir DIR\n";
    return kExitUsage;
  }
  for (const absl::Status& s : {SetTimes(times, &options.coordinator), SetSubmitRate(submit_rate, &options),
                                SetRetention(keep_finished_jobs, keep_finished_for, &options.coordinator)}) {
    if (!s.ok()) {
      err << "error: " << s.message() << "\n";
      return kExitUsage;
    }
  }
  if (absl::optional<int> code = SetUpLogging(log_level, err)) return *code;
  absl::StatusOr<std::string> root = AbsoluteOutputRoot(output_root);
  if (!root.ok()) {
    err << "error: " << root.status().message() << "\n";
    return kExitUsage;
  }
  options.coordinator.output_root = *root;
  options.coordinator.heartbeat_interval = absl::Seconds(1);
  absl::Status status = ServeCoordinator(options, out);
  if (!status.ok()) {
    err << "error: " << status.message() << "\n";
    return absl::IsInvalidArgument(status) ? kExitUsage : kExitFailed;
  }
  return kExitOk;
}

}  // namespace trainyard

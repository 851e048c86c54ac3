// What the service costs: steps/s of the same job run in-process (the
// worker's own WorkerCore driven directly: no gRPC, no coordinator) and
// through a coordinator and a worker process (gRPC over loopback, chunks of
// summary_period steps), alternating, several repetitions. Both time the
// same thing: from the first step to the end of the last one, including the
// final checkpoint. Prints one JSON line per run and a summary line.
//
//   bazel build --config=opt //bench:overhead_bench //client:trainyard
//   bazel-bin/bench/overhead_bench --trainyard bazel-bin/client/trainyard
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "client/job_client.h"
#include "common/blas.h"
#include "spec/jobspec.h"
#include "spec/jobspec_validator.h"
#include "worker/worker_core.h"

namespace trainyard {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

JobSpec BenchSpec(int steps, int summary_period, int batch) {
  JobSpec spec;
  spec.set_name("overhead");
  spec.mutable_model()->set_preset("tiny");
  spec.set_task("digits_to_words");
  spec.mutable_feature_lengths()->set_inputs(16);
  spec.mutable_feature_lengths()->set_targets(32);
  spec.set_batch_size(batch);
  spec.set_total_steps(steps);
  spec.set_summary_period(summary_period);
  spec.set_seed(1);
  return spec;
}

// Seconds for the job's steps in-process.
double InProcess(JobSpec spec, const std::string& output_dir) {
  spec.set_output_dir(output_dir);
  ValidationOptions validation;
  if (!ValidateAndNormalize(&spec, validation).ok()) std::abort();
  WorkerCore core(WorkerCoreOptions{});
  StartJobRequest start;
  start.set_job_id(output_dir);
  *start.mutable_spec() = spec;
  start.set_world_size(1);
  if (!core.StartJob(start).ok()) std::abort();
  const auto t0 = Clock::now();
  for (int64_t step = 0; step < spec.total_steps(); step += spec.summary_period()) {
    RunStepsRequest run;
    run.set_job_id(output_dir);
    run.set_first_step(step);
    run.set_num_steps(std::min<int64_t>(spec.summary_period(), spec.total_steps() - step));
    run.set_save_checkpoint(step + run.num_steps() == spec.total_steps());
    absl::StatusOr<RunStepsResponse> r = core.RunSteps(run);
    if (!r.ok()) {
      std::cerr << r.status() << "\n";
      std::abort();
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  AbortJobRequest abort;
  abort.set_job_id(output_dir);
  (void)core.AbortJob(abort);
  return seconds;
}

struct Process {
  pid_t pid;
  std::string listening;
};

Process Spawn(const std::string& exe, std::vector<std::string> args) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  std::vector<char*> argv = {const_cast<char*>(exe.c_str())};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  return {pid, line.substr(std::string("listening on ").size())};
}

// Seconds from the job's RUNNING event to its SUCCEEDED event.
double ThroughService(JobClient* client, JobSpec spec, const std::string& output_dir) {
  absl::StatusOr<SubmitJobResponse> submitted = client->Submit(spec, {"output_dir=" + output_dir});
  if (!submitted.ok()) {
    std::cerr << submitted.status() << "\n";
    std::abort();
  }
  Clock::time_point running, done;
  absl::StatusOr<JobInfo> last = client->Watch(submitted->job_id(), [&](const JobEvent& e) {
    if (e.job().state() == RUNNING && running == Clock::time_point()) running = Clock::now();
    if (e.job().state() == SUCCEEDED) done = Clock::now();
    return true;
  });
  if (!last.ok() || last->state() != SUCCEEDED) std::abort();
  std::fprintf(stderr, "service run: the worker's own steps/s over the last chunk: %.3f\n",
               last->metrics().at("timing/steps_per_second"));
  return std::chrono::duration<double>(done - running).count();
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  trainyard::ReexecWithTunedBlas(argv);
  using namespace trainyard;
  std::string trainyard_bin = "bazel-bin/client/trainyard";
  int steps = 200, period = 20, batch = 2, reps = 3;
  FlagSet flags("overhead_bench --trainyard PATH", "In-process steps/s versus through coordinator + worker.");
  flags.AddString("trainyard", &trainyard_bin, "PATH", "the trainyard binary");
  flags.AddInt("steps", &steps, "N", "steps per job (default 200)");
  flags.AddInt("summary-period", &period, "N", "steps per RunSteps chunk (default 20)");
  flags.AddInt("batch", &batch, "N", "global batch (default 2: ~20 ms steps of `tiny` here)");
  flags.AddInt("reps", &reps, "N", "repetitions of each (default 3)");
  std::vector<std::string> positional;
  if (auto code =
          flags.ParseCommand(std::vector<std::string>(argv + 1, argv + argc), &positional, std::cout, std::cerr)) {
    return *code;
  }
  const std::string exe = std::filesystem::absolute(trainyard_bin).string();
  char pattern[] = "/tmp/overhead-bench-XXXXXX";
  const std::string root = mkdtemp(pattern);
  Process coordinator = Spawn(exe, {"coordinator", "--listen", "127.0.0.1:0", "--state-dir", root + "/state",
                                    "--output-root", root, "--log-level", "warn"});
  Process worker = Spawn(exe, {"worker", "--coordinator", coordinator.listening, "--log-level", "warn"});
  JobClient client(coordinator.listening);
  const JobSpec spec = BenchSpec(steps, period, batch);
  std::vector<double> local_rate, service_rate;
  // A warm-up of each, then alternate.
  InProcess(spec, root + "/warm-a");
  ThroughService(&client, spec, "warm-b");
  for (int r = 0; r < reps; ++r) {
    const double a = InProcess(spec, absl::StrCat(root, "/a", r));
    const double b = ThroughService(&client, spec, absl::StrCat("b", r));
    local_rate.push_back(steps / a);
    service_rate.push_back(steps / b);
    std::printf("{\"bench\":\"overhead\",\"rep\":%d,\"in_process_steps_per_s\":%.3f,\"service_steps_per_s\":%.3f}\n", r,
                steps / a, steps / b);
    std::fflush(stdout);
  }
  const double a = Median(local_rate), b = Median(service_rate);
  std::printf(
      "{\"bench\":\"overhead\",\"summary\":true,\"steps\":%d,\"steps_per_chunk\":%d,\"batch\":%d,"
      "\"step_ms_in_process\":%.2f,\"in_process_steps_per_s\":%.3f,\"service_steps_per_s\":%.3f,"
      "\"service_cost_percent\":%.2f}\n",
      steps, period, batch, 1000.0 / a, a, b, 100.0 * (a - b) / a);
  kill(worker.pid, SIGTERM);
  kill(coordinator.pid, SIGTERM);
  waitpid(worker.pid, nullptr, 0);
  waitpid(coordinator.pid, nullptr, 0);
  std::filesystem::remove_all(root);
  return 0;
}

// `trainyard local`: a coordinator and N workers as child processes on
// loopback ports chosen by the OS, one job submitted and watched, and
// everything shut down afterwards, also on Ctrl-C.
//
// Children run in their own process groups (the terminal's Ctrl-C reaches
// only this process, which then shuts them down in order) and with
// PR_SET_PDEATHSIG, so that they die with it even if it is killed outright.
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/job_client.h"
#include "client/job_format.h"
#include "common/signals.h"
#include "spec/jobspec.h"
#include "spec/overrides.h"

namespace trainyard {
namespace {

struct Child {
  std::string name;
  pid_t pid = -1;
  int stdout_fd = -1;
  std::string log;
  bool reaped = false;
};

std::string SelfExe() {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, static_cast<size_t>(n)) : "trainyard";
}

std::string LogTail(const std::string& path, int lines = 15) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size(); ++i) {
    absl::StrAppend(&out, "    ", all[i], "\n");
  }
  return out;
}

absl::StatusOr<Child> Spawn(const std::string& name, const std::vector<std::string>& args, const std::string& log) {
  Child child;
  child.name = name;
  child.log = log;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("cannot create ", log, ": ", std::strerror(errno)));
  }
  const std::string exe = SelfExe();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    dup2(fds[1], STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  close(log_fd);
  child.pid = pid;
  child.stdout_fd = fds[0];
  return child;
}

// Reads the child's first stdout line, `listening on HOST:PORT`.
absl::StatusOr<std::string> ReadListening(Child& child, absl::Duration timeout) {
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  while (line.find('\n') == std::string::npos) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(child.name, " did not start within ",
                                                      absl::FormatDuration(timeout), "; its log (", child.log, "):\n",
                                                      LogTail(child.log)));
    }
    pollfd p = {child.stdout_fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) <= 0) continue;
    char buffer[256];
    const ssize_t n = read(child.stdout_fd, buffer, sizeof(buffer));
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat(child.name, " exited while starting; its log (", child.log, "):\n", LogTail(child.log)));
    }
    line.append(buffer, static_cast<size_t>(n));
  }
  line.resize(line.find('\n'));
  constexpr char kPrefix[] = "listening on ";
  if (!absl::StartsWith(line, kPrefix)) {
    return absl::InternalError(absl::StrCat(child.name, " printed '", line, "' instead of its address"));
  }
  return line.substr(sizeof(kPrefix) - 1);
}

// SIGTERM to all, then SIGKILL to those still running after `grace`;
// reaps every one.
void StopAll(std::vector<Child*> children, absl::Duration grace) {
  for (Child* c : children) {
    if (c->pid > 0 && !c->reaped) kill(c->pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (Child* c : children) {
    if (c->pid <= 0 || c->reaped) continue;
    while (true) {
      int status;
      const pid_t r = waitpid(c->pid, &status, WNOHANG);
      if (r == c->pid || (r < 0 && errno == ECHILD)) break;
      if (absl::Now() > deadline) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    c->reaped = true;
    if (c->stdout_fd >= 0) close(c->stdout_fd);
    c->stdout_fd = -1;
  }
}

// Workers first (they abort their job), then the coordinator (children[0]).
void StopChildren(std::vector<Child>* children) {
  std::vector<Child*> workers;
  for (size_t i = 1; i < children->size(); ++i) workers.push_back(&(*children)[i]);
  StopAll(workers, absl::Seconds(15));
  if (!children->empty()) StopAll({&(*children)[0]}, absl::Seconds(15));
}

// The command line, checked.
struct LocalFlags {
  int workers = 0;  // 0: the spec's num_workers
  int threads = 0;  // 0: the default
  std::vector<std::string> overrides;
  std::string state_dir;
  std::string output_root;
};

// Parses and checks the flags and loads the spec (with --workers as an
// override of num_workers); an exit code when the command ends here.
absl::optional<int> ParseLocalFlags(const std::vector<std::string>& args, LocalFlags* local, JobSpec* spec,
                                    std::ostream& out, std::ostream& err) {
  FlagSet flags("local [--workers N] [--output-root DIR] SPEC [--set path=value]...",
                "Runs a job on this machine as a real multi-process system: a coordinator\n"
                "and N workers as child processes on loopback ports chosen by the OS. Submits\n"
                "the job, shows its progress, and shuts everything down when it ends (or on\n"
                "Ctrl-C, which cancels the job first). Exits 0 if the job succeeds.");
  flags.AddInt("workers", &local->workers, "N", "number of workers (default: the spec's num_workers)");
  flags.AddInt("threads", &local->threads, "N",
               "compute threads per worker (default: this machine's cores divided by the workers)");
  flags.AddRepeated("set", &local->overrides, "PATH=VALUE", "override a field of the spec");
  flags.AddString("state-dir", &local->state_dir, "DIR",
                  "the coordinator's state and the processes' logs (default: a new /tmp/trainyard-local-*)");
  flags.AddString("output-root", &local->output_root, "DIR",
                  "confine output_dir to DIR, relative paths taken from it, as a shared coordinator does "
                  "(default: no confinement; a relative output_dir is taken from the current directory)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (positional.size() != 1) {
    err << "error: want exactly one SPEC file\n";
    return kExitUsage;
  }
  if (local->threads < 0 || local->threads > 1024) {
    err << "error: --threads: " << local->threads << "; allowed 1..1024 (0: the default)\n";
    return kExitUsage;
  }
  absl::StatusOr<JobSpec> loaded = LoadJobSpec(positional[0]);
  if (!loaded.ok()) {
    err << "error: " << loaded.status().message() << "\n";
    return kExitUsage;
  }
  *spec = *std::move(loaded);
  if (local->workers < 0 || local->workers > 64) {
    err << "error: --workers: " << local->workers << "; allowed 1..64\n";
    return kExitUsage;
  }
  if (local->workers > 0) local->overrides.push_back(absl::StrCat("num_workers=", local->workers));
  if (!local->output_root.empty() && local->output_root[0] != '/') {
    err << "error: --output-root must be an absolute path, got \"" << local->output_root << "\"\n";
    return kExitUsage;
  }
  return absl::nullopt;
}

// Without --output-root a personal run writes where its user can: the
// coordinator confines nothing ("/"), and a relative output_dir is this
// directory's. The overrides are applied to the spec here, so that an
// output_dir they set is resolved too.
absl::optional<int> ResolveUnconfinedOutputDir(LocalFlags* local, JobSpec* spec, std::ostream& err) {
  if (absl::Status s = ApplyOverrides(local->overrides, spec); !s.ok()) {
    err << "error: " << s.message() << "\n";
    return kExitUsage;
  }
  local->overrides.clear();
  char cwd[PATH_MAX];
  if (!spec->output_dir().empty() && spec->output_dir()[0] != '/') {
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      err << "error: cannot read the current directory; give an absolute output_dir or --output-root\n";
      return kExitFailed;
    }
    spec->set_output_dir(absl::StrCat(cwd, "/", spec->output_dir()));
  }
  local->output_root = "/";
  return absl::nullopt;
}

// Creates --state-dir, or a new directory under /tmp without it; an exit
// code when it cannot.
absl::optional<int> MakeStateDir(std::string* state_dir, std::ostream& err) {
  if (state_dir->empty()) {
    char pattern[] = "/tmp/trainyard-local-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      err << "error: cannot create a state directory under /tmp: " << std::strerror(errno) << "\n";
      return kExitFailed;
    }
    *state_dir = pattern;
  } else if (mkdir(state_dir->c_str(), 0755) != 0 && errno != EEXIST) {
    err << "error: --state-dir: cannot create '" << *state_dir << "': " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  return absl::nullopt;
}

// Starts the coordinator, then `workers` workers registering with it, into
// `children` (the coordinator first), and waits until each listens. Returns
// the coordinator's address.
absl::StatusOr<std::string> StartProcesses(const LocalFlags& local, int workers, std::vector<Child>* children) {
  absl::StatusOr<Child> coordinator = Spawn("the coordinator",
                                            {"coordinator", "--listen", "127.0.0.1:0", "--state-dir", local.state_dir,
                                             "--heartbeat-timeout", "10", "--output-root", local.output_root},
                                            local.state_dir + "/coordinator.log");
  if (!coordinator.ok()) return coordinator.status();
  children->push_back(*coordinator);
  absl::StatusOr<std::string> address = ReadListening((*children)[0], absl::Seconds(30));
  if (!address.ok()) return address.status();
  // The workers share this machine's cores: never oversubscribe them.
  const int threads =
      local.threads > 0 ? local.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / workers);
  for (int i = 0; i < workers; ++i) {
    absl::StatusOr<Child> worker =
        Spawn(absl::StrCat("worker ", i),
              {"worker", "--coordinator", *address, "--listen", "127.0.0.1:0", "--threads", absl::StrCat(threads)},
              absl::StrCat(local.state_dir, "/worker-", i, ".log"));
    if (!worker.ok()) return worker.status();
    children->push_back(*worker);
  }
  for (size_t i = 1; i < children->size(); ++i) {
    absl::StatusOr<std::string> listening = ReadListening((*children)[i], absl::Seconds(60));
    if (!listening.ok()) return listening.status();
  }
  return address;
}

// Shows the job's progress until it ends. The first SIGINT or SIGTERM
// cancels it; a second one, or a job still not ended 30 s after the cancel,
// stops the watch anyway. Stops the processes before it returns. The exit
// code: the job's (WatchUntilDone), a failure if it was cancelled here.
int WatchJob(JobClient* client, const std::string& job_id, SignalWatcher* signals, std::vector<Child>* children,
             std::ostream& out, std::ostream& err) {
  std::atomic<bool> done{false};
  int exit_code = kExitFailed;
  const bool tty = &out == &std::cout && isatty(STDOUT_FILENO);
  std::thread watcher([&] {
    exit_code = WatchUntilDone(client, job_id, out, err, tty);
    done = true;
  });
  bool cancelled = false;
  absl::Time give_up = absl::InfiniteFuture();
  while (!done) {
    absl::optional<int> signo = signals->Wait(absl::Milliseconds(200));
    if (signo && !cancelled) {
      err << "\ninterrupted: cancelling " << job_id << " and stopping the processes\n";
      client->Cancel(job_id, "interrupted (trainyard local)").IgnoreError();
      cancelled = true;
      give_up = absl::Now() + absl::Seconds(30);
      signals->Clear();
    } else if (signo || absl::Now() > give_up) {
      break;  // a second interrupt, or the job does not end: stop anyway
    }
  }
  StopChildren(children);  // ends the watch stream if it is still open
  watcher.join();
  return cancelled ? kExitFailed : exit_code;
}

}  // namespace

int RunLocal(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  LocalFlags local;
  JobSpec spec;
  if (absl::optional<int> code = ParseLocalFlags(args, &local, &spec, out, err)) return *code;
  if (local.output_root.empty()) {
    if (absl::optional<int> code = ResolveUnconfinedOutputDir(&local, &spec, err)) return *code;
  }
  const int workers = local.workers > 0 ? local.workers : std::max(spec.num_workers(), 1);
  if (absl::optional<int> code = MakeStateDir(&local.state_dir, err)) return *code;

  absl::StatusOr<std::unique_ptr<SignalWatcher>> signals = SignalWatcher::Create({SIGINT, SIGTERM});
  if (!signals.ok()) {
    err << "error: " << signals.status().message() << "\n";
    return kExitFailed;
  }
  std::vector<Child> children;
  absl::StatusOr<std::string> address = StartProcesses(local, workers, &children);
  if (!address.ok()) {
    err << "error: " << address.status().message() << "\n";
    StopChildren(&children);
    return kExitFailed;
  }
  out << "coordinator " << *address << " with " << workers << " worker(s); logs in " << local.state_dir << std::endl;

  JobClient client(*address);
  absl::StatusOr<SubmitJobResponse> submitted = client.Submit(spec, local.overrides);
  if (!submitted.ok()) {
    err << "error: " << submitted.status().message() << "\n";
    StopChildren(&children);
    return absl::IsInvalidArgument(submitted.status()) ? kExitUsage : kExitFailed;
  }
  const std::string job_id = submitted->job_id();
  out << "submitted " << job_id << std::endl;
  return WatchJob(&client, job_id, signals->get(), &children, out, err);
}

}  // namespace trainyard

#include "client/job_format.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace trainyard {
namespace {

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

bool IsFinalState(JobState s) { return s == SUCCEEDED || s == FAILED || s == CANCELLED; }

}  // namespace

std::vector<std::string> GoodputLosses(const Goodput& goodput, int n) {
  std::vector<std::pair<double, const char*>> losses = {
      {goodput.recomputed_seconds(), "recomputed"},  {goodput.recovery_seconds(), "recovery"},
      {goodput.checkpoint_seconds(), "checkpoints"}, {goodput.evaluation_seconds(), "evaluation"},
      {goodput.data_wait_seconds(), "data waits"},   {goodput.queued_seconds(), "queued"},
      {goodput.startup_seconds(), "startup"},        {goodput.other_seconds(), "other"},
  };
  std::stable_sort(losses.begin(), losses.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (const auto& [seconds, name] : losses) {
    if (static_cast<int>(out.size()) == n || seconds < 0.05) break;
    out.push_back(absl::StrFormat("%s %.1f s", name, seconds));
  }
  return out;
}

namespace {}  // namespace

nlohmann::json JobJson(const JobInfo& job) {
  nlohmann::json j;
  j["job_id"] = job.job_id();
  j["name"] = job.spec().name();
  j["state"] = JobState_Name(job.state());
  j["step"] = job.step();
  j["total_steps"] = job.spec().total_steps();
  j["restarts"] = job.restarts();
  j["regroups"] = job.regroups();
  j["reason"] = job.reason();
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [k, v] : job.metrics()) {
    metrics[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(absl::StrCat(v));
  }
  j["metrics"] = metrics;
  j["metrics_step"] = job.metrics_step();
  j["latest_checkpoint"] = job.latest_checkpoint();
  j["checkpoint_failure"] = job.checkpoint_failure();
  j["output_dir"] = job.spec().output_dir();
  j["num_workers"] = job.spec().num_workers();
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankInfo& r : job.ranks()) {
    ranks.push_back({{"rank", r.rank()},
                     {"worker_id", r.worker_id()},
                     {"host", r.host()},
                     {"address", r.address()},
                     {"device", r.device()},
                     {"last_step_seconds", r.last_step_seconds()},
                     {"last_compute_seconds", r.last_compute_seconds()},
                     {"last_collective_seconds", r.last_collective_seconds()},
                     {"straggler", false}});
  }
  for (int r : Stragglers(job)) ranks[r]["straggler"] = true;
  j["ranks"] = ranks;
  j["create_time_unix_ms"] = job.create_time_unix_ms();
  j["update_time_unix_ms"] = job.update_time_unix_ms();
  j["end_time_unix_ms"] = job.end_time_unix_ms();
  const Goodput& g = job.goodput();
  j["goodput"] = {{"ratio", g.ratio()},
                  {"wall_seconds", g.wall_seconds()},
                  {"productive_seconds", g.productive_seconds()},
                  {"recomputed_seconds", g.recomputed_seconds()},
                  {"recovery_seconds", g.recovery_seconds()},
                  {"checkpoint_seconds", g.checkpoint_seconds()},
                  {"evaluation_seconds", g.evaluation_seconds()},
                  {"data_wait_seconds", g.data_wait_seconds()},
                  {"queued_seconds", g.queued_seconds()},
                  {"startup_seconds", g.startup_seconds()},
                  {"other_seconds", g.other_seconds()},
                  {"recomputed_steps", g.recomputed_steps()}};
  return j;
}

std::string FormatJob(const JobInfo& job) {
  std::string out = absl::StrCat("job ", job.job_id(), ": ", JobState_Name(job.state()), ", step ", job.step(), "/",
                                 job.spec().total_steps(), "\n");
  if (!job.reason().empty()) absl::StrAppend(&out, "  reason: ", job.reason(), "\n");
  if (job.regroups() > 0) {
    absl::StrAppend(&out, "  regroups: ", job.regroups(), " (", job.ranks_size(), " of ", job.spec().num_workers(),
                    " workers now)\n");
  }
  absl::StrAppend(&out, "  output: ", job.spec().output_dir(), "\n");
  if (!job.latest_checkpoint().empty()) absl::StrAppend(&out, "  checkpoint: ", job.latest_checkpoint(), "\n");
  if (const Goodput& g = job.goodput(); g.wall_seconds() > 0) {
    const std::vector<std::string> losses = GoodputLosses(g, 3);
    absl::StrAppend(&out,
                    absl::StrFormat("  goodput: %.1f %% (%.1f s productive of %.1f s)", 100 * g.ratio(),
                                    g.productive_seconds(), g.wall_seconds()),
                    losses.empty() ? "" : absl::StrCat("; largest losses: ", absl::StrJoin(losses, ", ")), "\n");
  }
  if (!job.checkpoint_failure().empty()) {
    absl::StrAppend(&out, "  checkpoint failing: ", job.checkpoint_failure(), "\n");
  }
  if (!job.metrics().empty()) {
    absl::StrAppend(&out, "  metrics at step ", job.metrics_step(), ":\n");
    std::map<std::string, double> sorted(job.metrics().begin(), job.metrics().end());
    for (const auto& [k, v] : sorted) absl::StrAppend(&out, absl::StrFormat("    %-48s %.6g\n", k, v));
  }
  if (job.ranks_size() > 0) {
    std::vector<bool> slow(job.ranks_size(), false);
    for (int r : Stragglers(job)) slow[r] = true;
    // Seconds per step of the last chunk: wall, and of it, outside and in
    // collective operations.
    absl::StrAppend(&out, "  ranks:\n",
                    absl::StrFormat("    %-4s %-20s %-16s %-22s %-8s %10s %10s %10s\n", "rank", "worker", "host",
                                    "address", "device", "s/step", "compute", "collective"));
    for (int i = 0; i < job.ranks_size(); ++i) {
      const RankInfo& r = job.ranks(i);
      absl::StrAppend(
          &out, absl::StrFormat("    %-4d %-20s %-16s %-22s %-8s %10.4f %10.4f %10.4f%s\n", r.rank(), r.worker_id(),
                                r.host(), r.address(), r.device(), r.last_step_seconds(), r.last_compute_seconds(),
                                r.last_collective_seconds(), slow[i] ? "  (straggler)" : ""));
    }
  }
  return out;
}

std::vector<int> Stragglers(const JobInfo& job) {
  const int n = job.ranks_size();
  std::vector<int> out;
  bool computed = n > 1;
  for (const RankInfo& r : job.ranks()) computed = computed && r.last_compute_seconds() > 0;
  if (computed) {
    for (int i = 0; i < n; ++i) {
      std::vector<double> others;
      for (int j = 0; j < n; ++j) {
        if (j != i) others.push_back(job.ranks(j).last_compute_seconds());
      }
      std::sort(others.begin(), others.end());
      const size_t m = others.size();
      const double median = m % 2 == 1 ? others[m / 2] : (others[m / 2 - 1] + others[m / 2]) / 2;
      const double mine = job.ranks(i).last_compute_seconds();
      if (mine > 1.25 * median && mine - median > 0.005) out.push_back(i);
    }
    return out;
  }
  double fastest = 0;
  for (const RankInfo& r : job.ranks()) {
    if (r.last_step_seconds() > 0 && (fastest == 0 || r.last_step_seconds() < fastest)) fastest = r.last_step_seconds();
  }
  for (int i = 0; i < n; ++i) {
    if (fastest > 0 && job.ranks(i).last_step_seconds() > 1.2 * fastest) out.push_back(i);
  }
  return out;
}

std::string ProgressLine(const JobInfo& job, double steps_per_second) {
  const int64_t total = std::max<int64_t>(job.spec().total_steps(), 1);
  const int64_t step = std::min(job.step(), total);
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * step / total);
  std::string line =
      absl::StrCat("[", std::string(filled, '#'), std::string(kWidth - filled, '-'), "] ", step, "/", total);
  if (steps_per_second > 0) {
    absl::StrAppend(&line, absl::StrFormat("  %.2f steps/s  ETA %s", steps_per_second,
                                           Duration(static_cast<double>(total - step) / steps_per_second)));
  }
  auto loss = job.metrics().find("loss");
  if (loss != job.metrics().end()) absl::StrAppend(&line, absl::StrFormat("  loss %.4f", loss->second));
  return line;
}

int WatchUntilDone(JobClient* client, const std::string& job_id, std::ostream& out, std::ostream& err, bool tty) {
  JobState state = JOB_STATE_UNSPECIFIED;
  int64_t printed_metrics_step = -1;
  // Rate over the steps seen while watching.
  absl::Time first_time;
  int64_t first_step = -1;
  double rate = -1;
  bool line_open = false;
  absl::StatusOr<JobInfo> final_job = client->Watch(job_id, [&](const JobEvent& event) {
    const JobInfo& job = event.job();
    if (job.state() == RUNNING) {
      if (first_step < 0) {
        first_step = job.step();
        first_time = absl::Now();
      } else if (job.step() > first_step) {
        rate = static_cast<double>(job.step() - first_step) / absl::ToDoubleSeconds(absl::Now() - first_time);
      }
    }
    if (job.state() != state) {
      if (line_open) out << "\n";
      line_open = false;
      state = job.state();
      out << job.job_id() << ": " << JobState_Name(state) << (job.reason().empty() ? "" : " (" + job.reason() + ")")
          << std::endl;
    }
    if (state == RUNNING) {
      if (tty) {
        out << "\r\033[K" << ProgressLine(job, rate) << std::flush;
        line_open = true;
      } else if (job.metrics_step() != printed_metrics_step && !job.metrics().empty()) {
        printed_metrics_step = job.metrics_step();
        out << ProgressLine(job, rate) << std::endl;
      }
    }
    return true;
  });
  if (line_open) out << "\n";
  if (!final_job.ok()) {
    err << "error: " << final_job.status().message() << "\n";
    return 1;
  }
  if (!IsFinalState(final_job->state())) {
    err << "error: the watch ended before the job did (coordinator stopping?)\n";
    return 1;
  }
  out << FormatJob(*final_job);
  return final_job->state() == SUCCEEDED ? 0 : 1;
}

}  // namespace trainyard

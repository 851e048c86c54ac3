#include "trainer/metrics_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "trainer/event_writer.h"

namespace trainyard {

MetricsManager::MetricsManager(std::string name, std::string summary_dir, int rank, int num_workers, Clock* clock)
    : name_(std::move(name)),
      log_dir_(rank == 0 && !summary_dir.empty() ? summary_dir + "/" + name_ : ""),
      enabled_(rank == 0),
      num_workers_(num_workers < 1 ? 1 : num_workers),
      clock_(clock),
      created_(clock->Now()),
      timer_start_(created_) {
  if (enabled_) thread_ = std::thread([this] { Run(); });
}

MetricsManager::~MetricsManager() { Close().IgnoreError(); }

void MetricsManager::StartDurationTimer() { timer_start_ = clock_->Now(); }

void MetricsManager::Enqueue(std::function<absl::Status()> work) {
  if (!enabled_) return;
  MutexLock lock(&mu_);
  if (closing_) return;
  queue_.push_back(std::move(work));
  cv_.Signal();
}

void MetricsManager::Run() {
  while (true) {
    std::function<absl::Status()> work;
    {
      MutexLock lock(&mu_);
      while (!closing_ && queue_.empty()) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // closing and drained
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status = work();
    if (!status.ok()) {
      spdlog::error("metrics {}: {}", name_, status.ToString());
      MutexLock lock(&mu_);
      if (first_error_.ok()) first_error_ = status;
    }
  }
}

absl::Status MetricsManager::Write(int64_t step, const std::map<std::string, double>& scalars) {
  if (log_dir_.empty()) return absl::OkStatus();
  if (writer_ == nullptr) {
    absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Open(log_dir_);
    if (!writer.ok()) return writer.status();
    writer_ = std::move(*writer);
  }
  const double wall_time = absl::ToDoubleSeconds(clock_->Now() - absl::UnixEpoch());
  for (const auto& [tag, value] : scalars) {
    absl::Status status = writer_->WriteScalar(tag, static_cast<float>(value), step, wall_time);
    if (!status.ok()) return status;
  }
  return writer_->Flush();
}

void MetricsManager::WriteScalar(const std::string& key, double value, int64_t step) {
  WriteScalars(step, {{key, value}});
}

void MetricsManager::WriteScalars(int64_t step, const std::map<std::string, double>& scalars) {
  Enqueue([this, step, scalars] { return Write(step, scalars); });
}

absl::optional<std::map<std::string, double>> MetricsManager::WriteMetricsSummary(std::map<std::string, double> metrics,
                                                                                  int64_t step, int64_t num_steps) {
  const absl::Time now = clock_->Now();
  const double seconds = absl::ToDoubleSeconds(now - timer_start_);
  timer_start_ = now;
  if (!enabled_) return absl::nullopt;
  metrics["timing/seconds"] = seconds;
  metrics["timing/uptime"] = absl::ToDoubleSeconds(now - created_);
  if (seconds > 0) {
    metrics["timing/steps_per_second"] = static_cast<double>(num_steps) / seconds;
    for (const char* total : {"seqs", "target_tokens", "model_flops"}) {
      auto it = metrics.find(absl::StrCat("timing/", total));
      if (it == metrics.end()) continue;
      const double rate = it->second / seconds;
      metrics[absl::StrCat("timing/", total, "_per_second")] = rate;
      metrics[absl::StrCat("timing/", total, "_per_second_per_core")] = rate / num_workers_;
    }
  }
  auto per_core = metrics.find("timing/model_flops_per_second_per_core");
  if (per_core != metrics.end()) {
    const double achieved = per_core->second;
    if (peak_flops_per_core_ > 0) metrics["timing/mfu"] = achieved / peak_flops_per_core_;
    if (measured_peak_flops_per_core_ > 0) {
      metrics["timing/mfu_vs_measured_peak"] = achieved / measured_peak_flops_per_core_;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [name, value] : metrics) parts.push_back(absl::StrCat(name, "=", value));
  spdlog::info("{} step {}: {}", name_, step, absl::StrJoin(parts, " "));
  WriteScalars(step, metrics);
  return metrics;
}

absl::Status MetricsManager::Close() {
  {
    MutexLock lock(&mu_);
    closing_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  return first_error_;
}

}  // namespace trainyard

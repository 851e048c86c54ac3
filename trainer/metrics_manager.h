// MetricsManager (T5X's): writes metric summaries to TensorBoard event files
// under summary_dir/name and to the log, on a background thread, in order.
// Only rank 0 writes; on other ranks nothing is created and
// WriteMetricsSummary returns nullopt.
//
// Timing metrics are derived here: for a summary of `num_steps` steps ending
// at `step`, with the duration measured since the last summary (or
// StartDurationTimer):
//   timing/seconds, timing/steps_per_second, timing/uptime, and, when the
//   metrics carry the totals "timing/seqs" and "timing/target_tokens",
//   timing/seqs_per_second, timing/target_tokens_per_second and their
//   per-core variants (divided by the number of workers).
//
// Thread-safety: all methods may be called from the training thread while
// the writer thread runs; Close (or destruction) drains and joins it.
#ifndef TRAINYARD_TRAINER_METRICS_MANAGER_H_
#define TRAINYARD_TRAINER_METRICS_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace trainyard {

class EventFileWriter;

class MetricsManager {
 public:
  MetricsManager(std::string name, std::string summary_dir, int rank, int num_workers = 1,
                 Clock* clock = Clock::Real());
  ~MetricsManager();
  MetricsManager(const MetricsManager&) = delete;
  MetricsManager& operator=(const MetricsManager&) = delete;

  // Starts the duration of the next summary.
  void StartDurationTimer();
  void WriteScalar(const std::string& key, double value, int64_t step);
  void WriteScalars(int64_t step, const std::map<std::string, double>& scalars);
  // Adds timing metrics, queues the summary for writing, and returns it (rank
  // 0) or nullopt (other ranks).
  absl::optional<std::map<std::string, double>> WriteMetricsSummary(std::map<std::string, double> metrics, int64_t step,
                                                                    int64_t num_steps);
  // The peak FLOP/s of one worker's device: summaries with
  // timing/model_flops (the period's model FLOPs over all workers) then get
  // timing/mfu = timing/model_flops_per_second_per_core / peak. 0: none.
  void set_peak_flops_per_core(double peak) { peak_flops_per_core_ = peak; }
  // The same against a measured peak (a matrix-product probe):
  // timing/mfu_vs_measured_peak. 0: none.
  void set_measured_peak_flops_per_core(double peak) { measured_peak_flops_per_core_ = peak; }
  // Writes everything queued, joins the writer thread; returns the first
  // write error, if any. Idempotent.
  absl::Status Close();

  // summary_dir/name, where the event files go (empty on ranks != 0).
  const std::string& log_dir() const { return log_dir_; }

 private:
  void Enqueue(std::function<absl::Status()> work);
  void Run();
  absl::Status Write(int64_t step, const std::map<std::string, double>& scalars);

  const std::string name_;
  const std::string log_dir_;
  const bool enabled_;
  const int num_workers_;
  double peak_flops_per_core_ = 0;
  double measured_peak_flops_per_core_ = 0;
  Clock* const clock_;
  const absl::Time created_;
  absl::Time timer_start_;

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<absl::Status()>> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  std::unique_ptr<EventFileWriter> writer_;  // writer thread only
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_METRICS_MANAGER_H_

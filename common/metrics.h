// Process metrics in the Prometheus text exposition format (0.0.4):
// counters, gauges and histograms, each with optional labels.
//
//   MetricsRegistry registry;
//   Counter* rpcs = registry.AddCounter("trainyard_rpc_requests_total", "RPCs handled");
//   rpcs->Increment({{"method", "SubmitJob"}, {"code", "OK"}});
//   std::string page = registry.Render();
//
// Gauges that mirror state are best set in an OnScrape callback, which runs
// before every Render. Thread-safe; handles stay valid as long as the
// registry.
#ifndef TRAINYARD_COMMON_METRICS_H_
#define TRAINYARD_COMMON_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace trainyard {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry;

class Counter {
 public:
  void Increment(const MetricLabels& labels = {}, double delta = 1);
  // Exports the series at 0 before its first increment (so that rates
  // start from the process's start).
  void Init(const MetricLabels& labels = {}) { Increment(labels, 0); }

 private:
  friend class MetricsRegistry;
  explicit Counter(MetricsRegistry* registry, size_t index) : registry_(registry), index_(index) {}
  MetricsRegistry* registry_;
  size_t index_;
};

class Gauge {
 public:
  void Set(double value, const MetricLabels& labels = {});
  void Add(double delta, const MetricLabels& labels = {});
  // Forgets every label set (before a scrape-time refresh).
  void Clear();

 private:
  friend class MetricsRegistry;
  explicit Gauge(MetricsRegistry* registry, size_t index) : registry_(registry), index_(index) {}
  MetricsRegistry* registry_;
  size_t index_;
};

class Histogram {
 public:
  void Observe(double value, const MetricLabels& labels = {});
  // Exports the series empty before its first observation.
  void Init(const MetricLabels& labels = {});

 private:
  friend class MetricsRegistry;
  explicit Histogram(MetricsRegistry* registry, size_t index) : registry_(registry), index_(index) {}
  MetricsRegistry* registry_;
  size_t index_;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Names follow Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*; counters end in
  // _total); adding a name twice returns the first metric. Histogram
  // `bounds` are the buckets' upper bounds, increasing (+Inf is added).
  Counter* AddCounter(const std::string& name, const std::string& help);
  Gauge* AddGauge(const std::string& name, const std::string& help);
  Histogram* AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void OnScrape(std::function<void()> refresh);

  // Every metric, in the order added; label sets sorted.
  std::string Render();

  // Buckets for latencies from a millisecond to ten minutes.
  static std::vector<double> LatencyBuckets();

 private:
  friend class Counter;
  friend class Gauge;
  friend class Histogram;
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;              // counter, gauge
    std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    std::string name, help;
    Type type;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // by rendered label set
  };
  static std::string LabelKey(const MetricLabels& labels);
  size_t Add(const std::string& name, const std::string& help, Type type, std::vector<double> bounds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  std::vector<Family> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Counter>> counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Gauge>> gauges_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Histogram>> histograms_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> refreshers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_METRICS_H_

#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// `{a="x",b="y"}` with `extra` (e.g. le="0.5") appended; "" for none.
std::string WithLabel(const std::string& key, const std::string& extra) {
  if (key.empty()) return extra.empty() ? "" : "{" + extra + "}";
  if (extra.empty()) return "{" + key + "}";
  return "{" + key + "," + extra + "}";
}

}  // namespace

void Counter::Increment(const MetricLabels& labels, double delta) {
  if (delta < 0) return;  // counters only go up
  MutexLock lock(&registry_->mu_);
  registry_->families_[index_].series[MetricsRegistry::LabelKey(labels)].value += delta;
}

void Gauge::Set(double value, const MetricLabels& labels) {
  MutexLock lock(&registry_->mu_);
  registry_->families_[index_].series[MetricsRegistry::LabelKey(labels)].value = value;
}

void Gauge::Add(double delta, const MetricLabels& labels) {
  MutexLock lock(&registry_->mu_);
  registry_->families_[index_].series[MetricsRegistry::LabelKey(labels)].value += delta;
}

void Gauge::Clear() {
  MutexLock lock(&registry_->mu_);
  registry_->families_[index_].series.clear();
}

void Histogram::Observe(double value, const MetricLabels& labels) {
  MutexLock lock(&registry_->mu_);
  MetricsRegistry::Family& f = registry_->families_[index_];
  MetricsRegistry::Series& s = f.series[MetricsRegistry::LabelKey(labels)];
  if (s.counts.empty()) s.counts.assign(f.bounds.size() + 1, 0);
  const size_t bucket = std::lower_bound(f.bounds.begin(), f.bounds.end(), value) - f.bounds.begin();
  s.counts[bucket]++;
  s.sum += value;
  s.count++;
}

void Histogram::Init(const MetricLabels& labels) {
  MutexLock lock(&registry_->mu_);
  MetricsRegistry::Family& f = registry_->families_[index_];
  MetricsRegistry::Series& s = f.series[MetricsRegistry::LabelKey(labels)];
  if (s.counts.empty()) s.counts.assign(f.bounds.size() + 1, 0);
}

std::string MetricsRegistry::LabelKey(const MetricLabels& labels) {
  MetricLabels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string key;
  for (const auto& [name, value] : sorted) {
    absl::StrAppend(&key, key.empty() ? "" : ",", name, "=\"", EscapeLabel(value), "\"");
  }
  return key;
}

size_t MetricsRegistry::Add(const std::string& name, const std::string& help, Type type, std::vector<double> bounds) {
  for (size_t i = 0; i < families_.size(); ++i) {
    if (families_[i].name == name) return i;
  }
  Family f;
  f.name = name;
  f.help = help;
  f.type = type;
  f.bounds = std::move(bounds);
  families_.push_back(std::move(f));
  return families_.size() - 1;
}

Counter* MetricsRegistry::AddCounter(const std::string& name, const std::string& help) {
  MutexLock lock(&mu_);
  const size_t index = Add(name, help, Type::kCounter, {});
  for (const auto& c : counters_) {
    if (c->index_ == index) return c.get();
  }
  counters_.push_back(std::unique_ptr<Counter>(new Counter(this, index)));
  return counters_.back().get();
}

Gauge* MetricsRegistry::AddGauge(const std::string& name, const std::string& help) {
  MutexLock lock(&mu_);
  const size_t index = Add(name, help, Type::kGauge, {});
  for (const auto& g : gauges_) {
    if (g->index_ == index) return g.get();
  }
  gauges_.push_back(std::unique_ptr<Gauge>(new Gauge(this, index)));
  return gauges_.back().get();
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  MutexLock lock(&mu_);
  const size_t index = Add(name, help, Type::kHistogram, std::move(bounds));
  for (const auto& h : histograms_) {
    if (h->index_ == index) return h.get();
  }
  histograms_.push_back(std::unique_ptr<Histogram>(new Histogram(this, index)));
  return histograms_.back().get();
}

void MetricsRegistry::OnScrape(std::function<void()> refresh) {
  MutexLock lock(&mu_);
  refreshers_.push_back(std::move(refresh));
}

std::vector<double> MetricsRegistry::LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
}

std::string MetricsRegistry::Render() {
  std::vector<std::function<void()>> refreshers;
  {
    MutexLock lock(&mu_);
    refreshers = refreshers_;
  }
  for (const auto& refresh : refreshers) refresh();  // they take the lock themselves
  MutexLock lock(&mu_);
  std::string out;
  for (const Family& f : families_) {
    const char* type = f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram";
    absl::StrAppend(&out, "# HELP ", f.name, " ", EscapeHelp(f.help), "\n# TYPE ", f.name, " ", type, "\n");
    for (const auto& [key, s] : f.series) {
      if (f.type != Type::kHistogram) {
        absl::StrAppend(&out, f.name, WithLabel(key, ""), " ", Number(s.value), "\n");
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= f.bounds.size(); ++b) {
        cumulative += s.counts[b];
        const std::string le = b < f.bounds.size() ? Number(f.bounds[b]) : "+Inf";
        absl::StrAppend(&out, f.name, "_bucket", WithLabel(key, "le=\"" + le + "\""), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, f.name, "_sum", WithLabel(key, ""), " ", Number(s.sum), "\n");
      absl::StrAppend(&out, f.name, "_count", WithLabel(key, ""), " ", s.count, "\n");
    }
  }
  return out;
}

}  // namespace trainyard

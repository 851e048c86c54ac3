#include "common/metrics.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(MetricsRegistryTest, RendersPrometheusText) {
  MetricsRegistry r;
  Counter* rpcs = r.AddCounter("t_rpcs_total", "RPCs handled");
  Gauge* jobs = r.AddGauge("t_jobs", "jobs by state");
  Histogram* latency = r.AddHistogram("t_latency_seconds", "latency", {0.1, 1});
  rpcs->Increment({{"method", "Submit"}, {"code", "OK"}});
  rpcs->Increment({{"code", "OK"}, {"method", "Submit"}}, 2);  // same series, labels in any order
  rpcs->Increment({{"method", "Get"}, {"code", "NOT_FOUND"}});
  rpcs->Increment({{"method", "Get"}, {"code", "NOT_FOUND"}}, -5);  // ignored: counters only go up
  jobs->Set(3, {{"state", "RUNNING"}});
  jobs->Set(0, {{"state", "PENDING"}});
  latency->Observe(0.05);
  latency->Observe(0.1);  // le is inclusive
  latency->Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP t_rpcs_total RPCs handled\n"
            "# TYPE t_rpcs_total counter\n"
            "t_rpcs_total{code=\"NOT_FOUND\",method=\"Get\"} 1\n"
            "t_rpcs_total{code=\"OK\",method=\"Submit\"} 3\n"
            "# HELP t_jobs jobs by state\n"
            "# TYPE t_jobs gauge\n"
            "t_jobs{state=\"PENDING\"} 0\n"
            "t_jobs{state=\"RUNNING\"} 3\n"
            "# HELP t_latency_seconds latency\n"
            "# TYPE t_latency_seconds histogram\n"
            "t_latency_seconds_bucket{le=\"0.10000000000000001\"} 2\n"
            "t_latency_seconds_bucket{le=\"1\"} 2\n"
            "t_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "t_latency_seconds_sum 7.1500000000000004\n"
            "t_latency_seconds_count 3\n");
}

TEST(MetricsRegistryTest, EscapesAndRefreshesAtScrape) {
  MetricsRegistry r;
  Gauge* g = r.AddGauge("t_g", "a \\ help\nline");
  EXPECT_EQ(r.AddGauge("t_g", "again"), g);  // the same metric
  int scrapes = 0;
  r.OnScrape([&] {
    g->Clear();
    g->Set(++scrapes, {{"path", "a\"b\\c\nd"}});
  });
  EXPECT_EQ(r.Render(), "# HELP t_g a \\\\ help\\nline\n# TYPE t_g gauge\nt_g{path=\"a\\\"b\\\\c\\nd\"} 1\n");
  EXPECT_NE(r.Render().find("} 2\n"), std::string::npos);
}

}  // namespace
}  // namespace trainyard

// `trainyard worker` (in trainyard-torch): runs a worker process.
#include <ATen/Parallel.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/blas.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"
#include "worker/server.h"

namespace trainyard {

int RunWorker(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  WorkerServerOptions options;
  std::string log_level = "info";
  int collective_timeout = 60;
  int orphan_timeout = 300;
  int threads = 0;
  FlagSet flags("worker --coordinator HOST:PORT [--listen HOST:PORT] [--device cpu]",
                "Runs a worker: registers with the coordinator, heartbeats, and runs the\n"
                "steps of the jobs it is given. The first line on stdout is `listening on\n"
                "HOST:PORT`. SIGTERM or SIGINT stops it (its job is aborted).");
  flags.AddString("coordinator", &options.coordinator, "HOST:PORT", "the coordinator (required)");
  flags.AddString("listen", &options.listen, "HOST:PORT", "where to serve (default 127.0.0.1:0)");
  flags.AddString("advertise-host", &options.advertise_host, "HOST",
                  "the address other processes reach this worker at (default: the listen host)");
  flags.AddString("device", &options.device, "DEVICE", "cpu (default)");
  flags.AddInt("threads", &threads, "N",
               "compute threads (ATen and the BLAS; default: every core, for one worker per host)");
  flags.AddInt("collective-timeout", &collective_timeout, "SECONDS",
               "a collective operation waits at most this long for its peers (default 60)");
  flags.AddInt("orphan-timeout", &orphan_timeout, "SECONDS",
               "how long the held job outlives an unreachable coordinator, for a restarted one to\n"
               "adopt it (default 300)");
  flags.AddString("log-level", &log_level, "LEVEL", "trace, debug, info, warn, error (default info)");
  std::string peak_tflops;
  flags.AddString("peak-tflops", &peak_tflops, "X",
                  "the device's dense peak in TFLOP/s for the compute dtype, for the train summary's\n"
                  "timing/mfu (default: the GPU's datasheet figure, or the CPU's cores x clock x FLOPs\n"
                  "per cycle; a matrix-product probe for other devices)");
  AddTlsFlags(&flags, &options.tls, &options.insecure);
  flags.AddString("metrics-listen", &options.metrics_listen, "HOST:PORT",
                  "serve Prometheus /metrics and /healthz over HTTP there (default: off)");
  std::vector<std::string> positional;
  if (absl::optional<int> code = flags.ParseCommand(args, &positional, out, err)) return *code;
  if (!positional.empty() || options.coordinator.empty()) {
    err << "error: want: trainyard worker --coordinator HOST:PORT\n";
    return kExitUsage;
  }
  if (collective_timeout < 1) {
    err << "error: --collective-timeout: " << collective_timeout << "; want at least 1 second\n";
    return kExitUsage;
  }
  if (orphan_timeout < 1) {
    err << "error: --orphan-timeout: " << orphan_timeout << "; want at least 1 second\n";
    return kExitUsage;
  }
  if (threads < 0 || threads > 1024) {
    err << "error: --threads: " << threads << "; allowed 1..1024 (0: every core)\n";
    return kExitUsage;
  }
  if (!peak_tflops.empty()) {
    double tflops = 0;
    if (!absl::SimpleAtod(peak_tflops, &tflops) || !(tflops > 0) || tflops > 1e6) {
      err << "error: --peak-tflops: '" << peak_tflops << "'; want a number of TFLOP/s in (0, 1e6]\n";
      return kExitUsage;
    }
    options.peak_flops = tflops * 1e12;
  }
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.collective_timeout = absl::Seconds(collective_timeout);
  options.orphan_timeout = absl::Seconds(orphan_timeout);
  if (absl::optional<int> code = SetUpLogging(log_level, err)) return *code;
  at::set_num_threads(threads);
  SetBlasThreads(threads);
  spdlog::info("worker: {} compute thread(s); BLAS: {}", threads, BlasDescription());
  absl::Status status = ServeWorker(options, out);
  if (!status.ok()) {
    err << "error: " << status.message() << "\n";
    return absl::IsInvalidArgument(status) ? kExitUsage : kExitFailed;
  }
  return kExitOk;
}

}  // namespace trainyard

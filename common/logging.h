// Process-wide logging through spdlog. Every line carries the job, the rank
// and the host ("job=j-3 rank=1 host=node7"), so the logs of many workers can
// be merged and still read.
//
// Thread-safety: all functions may be called from any thread. The context is
// read by the formatter of every line, so changing it (a worker taking a new
// job) is visible to lines logged afterwards.
#ifndef TRAINYARD_COMMON_LOGGING_H_
#define TRAINYARD_COMMON_LOGGING_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace spdlog {
class logger;
namespace sinks {
class sink;
}  // namespace sinks
}  // namespace spdlog

namespace trainyard {

struct LogContext {
  std::string job;   // empty: "-"
  int rank = -1;     // negative: "-"
  std::string host;  // empty: this machine's hostname
};

void SetLogContext(const LogContext& context);
void SetLogJob(absl::string_view job, int rank);
LogContext GetLogContext();

// "job=<job> rank=<rank> host=<host>" for the current context.
std::string FormatLogContext();

struct LoggingOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  bool to_stderr = true;
  std::string file;  // also append to this file when not empty
};

// Replaces the default logger with one writing to the configured sinks with
// the Trainyard pattern. Returns false (and leaves logging as it was) if the
// level name is unknown or the file cannot be opened.
bool InitLogging(const LoggingOptions& options, std::string* error);

// A logger over `sink` with the Trainyard pattern (tests capture lines).
std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, std::shared_ptr<spdlog::sinks::sink> sink);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_LOGGING_H_

#include "common/logging.h"

#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/details/log_msg.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

std::mutex& ContextMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

LogContext& MutableContext() {
  static LogContext* context = new LogContext;
  return *context;
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// The %* flag: the job/rank/host triple.
class ContextFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string text = FormatLogContext();
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<ContextFlag>(); }
};

std::unique_ptr<spdlog::formatter> MakeFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<ContextFlag>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %L [%*] %v");
  return formatter;
}

}  // namespace

void SetLogContext(const LogContext& context) {
  std::lock_guard<std::mutex> lock(ContextMutex());
  MutableContext() = context;
}

void SetLogJob(absl::string_view job, int rank) {
  std::lock_guard<std::mutex> lock(ContextMutex());
  MutableContext().job = std::string(job);
  MutableContext().rank = rank;
}

LogContext GetLogContext() {
  std::lock_guard<std::mutex> lock(ContextMutex());
  return MutableContext();
}

std::string FormatLogContext() {
  LogContext c = GetLogContext();
  if (c.host.empty()) {
    static const std::string* host = new std::string(Hostname());
    c.host = *host;
  }
  return absl::StrCat("job=", c.job.empty() ? "-" : c.job, " rank=", c.rank < 0 ? "-" : absl::StrCat(c.rank),
                      " host=", c.host);
}

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, std::shared_ptr<spdlog::sinks::sink> sink) {
  auto logger = std::make_shared<spdlog::logger>(name, std::move(sink));
  logger->set_formatter(MakeFormatter());
  return logger;
}

bool InitLogging(const LoggingOptions& options, std::string* error) {
  const spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  // from_str maps unknown names to "off"; only "off" itself may mean off.
  if (level == spdlog::level::off && options.level != "off") {
    if (error) {
      *error = absl::StrCat("log level \"", options.level,
                            "\" is not one of trace, debug, info, warn, error, "
                            "critical, off");
    }
    return false;
  }
  std::vector<spdlog::sink_ptr> sinks;
  if (options.to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (!options.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file));
    } catch (const spdlog::spdlog_ex& e) {
      if (error) *error = absl::StrCat("cannot open log file ", options.file, ": ", e.what());
      return false;
    }
  }
  auto logger = std::make_shared<spdlog::logger>("trainyard", sinks.begin(), sinks.end());
  logger->set_formatter(MakeFormatter());
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return true;
}

}  // namespace trainyard

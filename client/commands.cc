// The subcommand table of the `trainyard` binary and its dispatcher.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "client/commands.h"
#include "common/logging.h"

namespace trainyard {
namespace {

// Runs `trainyard-torch COMMAND ARGS...` from the directory of this binary.
int ExecTorchBinary(char** argv, std::ostream& err) {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  dir = dir.substr(0, dir.rfind('/') + 1);
  const std::string path = dir + "trainyard-torch";
  std::vector<char*> args;
  args.push_back(const_cast<char*>("trainyard-torch"));
  for (char** a = argv + 1; *a != nullptr; ++a) args.push_back(*a);
  args.push_back(nullptr);
  err.flush();
  execv(path.c_str(), args.data());
  err << "error: cannot run " << path << " (installed next to trainyard, it runs the commands "
      << "that need LibTorch): " << std::strerror(errno) << "\n";
  return kExitFailed;
}

void PrintUsage(const std::vector<Command>& commands, std::ostream& out) {
  out << "usage: trainyard COMMAND [ARGS...]\n\n"
         "Trainyard: distributed T5 training (a C++ take on T5X's trainer).\n\n"
         "commands:\n";
  for (const Command& c : commands) {
    std::string name = c.name;
    name.resize(14, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\n`trainyard COMMAND --help` describes each command.\n"
         "Exit codes: 0 success, 1 the job or operation failed, 2 bad usage or input.\n";
}

}  // namespace

absl::optional<int> SetUpLogging(const std::string& level, std::ostream& err) {
  LoggingOptions logging;
  logging.level = level;
  std::string error;
  if (!InitLogging(logging, &error)) {
    err << "error: --log-level: " << error << "\n";
    return kExitUsage;
  }
  return absl::nullopt;
}

const std::vector<Command>& TrainyardCommands() {
  static const std::vector<Command>* commands = new std::vector<Command>{
      {"local", RunLocal, "run a job here: a coordinator and N worker processes"},
      {"submit", RunSubmit, "submit a job spec to a coordinator"},
      {"status", RunStatus, "a job's state, metrics and ranks"},
      {"list", RunList, "the coordinator's jobs"},
      {"watch", RunWatch, "follow a job with a progress bar until it ends"},
      {"cancel", RunCancel, "cancel a job"},
      {"checkpoint", RunCheckpoint, "make a running job write a checkpoint now"},
      {"coordinator", RunCoordinator, "run the coordinator process"},
      {"worker", nullptr, kWorkerSummary},
      {"predict", nullptr, kPredictSummary},
      {"score", nullptr, kScoreSummary},
      {"evaluate", nullptr, kEvaluateSummary},
      {"validate", RunValidate, "check job specs and print them normalised"},
      {"model-info", RunModelInfo, "a model preset's architecture and parameter count"},
      {"vocab", RunVocab, "train a SentencePiece vocabulary with T5's special ids"},
      {"convert", nullptr, kConvertSummary},
  };
  return *commands;
}

int RunTrainyard(const char* program, const std::vector<Command>& commands, int argc, char** argv, std::ostream& out,
                 std::ostream& err) {
  if (argc < 2) {
    PrintUsage(commands, err);
    return kExitUsage;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    PrintUsage(commands, out);
    return kExitOk;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : commands) {
    if (command != c.name) continue;
    if (c.run == nullptr) return ExecTorchBinary(argv, err);
    return c.run(args, out, err);
  }
  err << "error: " << program << ": unknown command \"" << command << "\"\n\n";
  PrintUsage(commands, err);
  return kExitUsage;
}

void AddTlsFlags(FlagSet* flags, TlsConfig* tls, bool* insecure) {
  *tls = TlsConfigFromEnv();
  flags->AddString("tls-cert", &tls->cert_file, "FILE",
                   "this process's certificate chain, PEM (default $TRAINYARD_TLS_CERT); with --tls-key\n"
                   "turns TLS on");
  flags->AddString("tls-key", &tls->key_file, "FILE", "its private key, PEM (default $TRAINYARD_TLS_KEY)");
  flags->AddString("tls-ca", &tls->ca_file, "FILE",
                   "the CA peers' certificates must chain to (default $TRAINYARD_TLS_CA); makes TLS\n"
                   "between coordinator and workers mutual");
  flags->AddString("tls-server-name", &tls->server_name, "NAME",
                   "the name expected in peers' server certificates when it is not the host\n"
                   "dialled (default $TRAINYARD_TLS_SERVER_NAME)");
  flags->AddBool("insecure", insecure, "allow plaintext on a non-loopback --listen address");
}

}  // namespace trainyard

// The subcommands of the `trainyard` multi-call binary, as plain functions
// over argument lists and streams so that tests run them in-process.
//
// Exit codes (for every subcommand): 0 success, 1 the job or operation
// failed, 2 bad usage or invalid input.
#ifndef TRAINYARD_CLIENT_COMMANDS_H_
#define TRAINYARD_CLIENT_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/types/optional.h"
#include "client/flags.h"
#include "common/grpc/security.h"

namespace trainyard {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// `trainyard validate SPEC... [--set k=v]... [--output-root DIR] [--json]`
int RunValidate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `trainyard model-info [--preset NAME] [--json]`
int RunModelInfo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `trainyard vocab train --input FILE... --size N --out PREFIX`
int RunVocab(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `trainyard convert (--from-hf HF_DIR [--vocab SPM] --out DIR | --checkpoint DIR --to-hf OUT)`
int RunConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `trainyard convert --from-gin RUN.gin ... --out SPEC.textproto`: a T5X gin
// configuration as a job spec (RunConvert hands --from-gin to it).
int RunConvertFromGin(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Processes (coordinator/server.h, worker/server.h).
// `trainyard coordinator --listen HOST:PORT --state-dir DIR [--output-root DIR]`
int RunCoordinator(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `trainyard worker --coordinator HOST:PORT [--listen HOST:PORT] [--device cpu]` (trainyard-torch)
int RunWorker(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `trainyard predict --checkpoint DIR [--task NAME] [--num N] [--input TEXT]...` (trainyard-torch)
int RunPredict(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// The interactive model on a checkpoint (client/interactive_commands.cc):
// `predict` with --examples or --json, `score`, `evaluate`.
int RunPredictExamples(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunScore(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunEvaluate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `trainyard local [--workers N] SPEC [--set k=v]...`
int RunLocal(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Job commands, against a coordinator (--coordinator or $TRAINYARD_COORDINATOR).
int RunSubmit(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunStatus(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunList(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunWatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunCancel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunCheckpoint(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Logging for the process commands at `level` (their --log-level); on a bad
// level prints the error and returns the exit code.
absl::optional<int> SetUpLogging(const std::string& level, std::ostream& err);

// The server commands' transport-security flags: --tls-cert, --tls-key,
// --tls-ca, --tls-server-name (defaults: TRAINYARD_TLS_CERT, _KEY, _CA,
// _SERVER_NAME) and --insecure.
void AddTlsFlags(FlagSet* flags, TlsConfig* tls, bool* insecure);

using CommandFn = int (*)(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// A subcommand. Commands that need LibTorch live in the sibling binary
// `trainyard-torch` (so that the light ones start in milliseconds instead of
// loading LibTorch); in `trainyard`'s table they have no `run` and are
// executed there, with the same arguments.
struct Command {
  const char* name;
  CommandFn run;  // nullptr: exec trainyard-torch
  const char* summary;
};

constexpr char kConvertSummary[] =
    "Hugging Face T5 and T5X checkpoints to Trainyard checkpoints and back, T5X gin configs to specs";
constexpr char kPredictSummary[] = "decode examples with a checkpoint's model";
constexpr char kScoreSummary[] = "log-likelihood of targets given inputs under a checkpoint's model";
constexpr char kEvaluateSummary[] = "metric functions of a checkpoint's predictions on examples";
constexpr char kWorkerSummary[] = "run a worker process (serves a coordinator's jobs)";

// The `trainyard` binary's commands, and the `trainyard-torch` binary's
// (defined with them, in //client:torch_commands).
const std::vector<Command>& TrainyardCommands();
const std::vector<Command>& TorchCommands();

// Dispatches argv[1] to a subcommand of `commands`; prints the command list
// on --help. `program` names the binary in messages.
int RunTrainyard(const char* program, const std::vector<Command>& commands, int argc, char** argv, std::ostream& out,
                 std::ostream& err);

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_COMMANDS_H_

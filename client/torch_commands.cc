// The command table of `trainyard-torch`.
#include "client/commands.h"

namespace trainyard {

const std::vector<Command>& TorchCommands() {
  static const std::vector<Command>* commands = new std::vector<Command>{
      {"convert", RunConvert, kConvertSummary},    {"worker", RunWorker, kWorkerSummary},
      {"predict", RunPredict, kPredictSummary},    {"score", RunScore, kScoreSummary},
      {"evaluate", RunEvaluate, kEvaluateSummary},
  };
  return *commands;
}

}  // namespace trainyard

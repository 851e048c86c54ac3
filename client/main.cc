// The `trainyard` multi-call binary.
#include <iostream>

#include "client/commands.h"
#include "common/signals.h"

int main(int argc, char** argv) {
  // Sockets (Gloo's, the TCP store's) report a reset peer as an error.
  trainyard::IgnoreBrokenPipes();
  trainyard::InstallFailureSignalHandler(argv[0]);
  return trainyard::RunTrainyard("trainyard", trainyard::TrainyardCommands(), argc, argv, std::cout, std::cerr);
}

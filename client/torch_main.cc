// `trainyard-torch`: the subcommands of `trainyard` that need LibTorch. The
// `trainyard` binary runs it for them (users need not call it directly).
#include <iostream>

#include "client/commands.h"
#include "common/blas.h"
#include "common/signals.h"

int main(int argc, char** argv) {
  trainyard::ReexecWithTunedBlas(argv);  // OpenBLAS picks its kernels at load time
  // Sockets (Gloo's, the TCP store's) report a reset peer as an error.
  trainyard::IgnoreBrokenPipes();
  trainyard::InstallFailureSignalHandler(argv[0]);
  return trainyard::RunTrainyard("trainyard-torch", trainyard::TorchCommands(), argc, argv, std::cout, std::cerr);
}

// `trainyard-torch`: the subcommands of `trainyard` that need LibTorch. The
// `trainyard` binary runs it for them (users need not call it directly).
#include <iostream>

#include "client/commands.h"
#include "common/blas.h"

int main(int argc, char** argv) {
  trainyard::ReexecWithTunedBlas(argv);  // OpenBLAS picks its kernels at load time
  return trainyard::RunTrainyard("trainyard-torch", trainyard::TorchCommands(), argc, argv, std::cout, std::cerr);
}

// `trainyard-torch`: the subcommands of `trainyard` that need LibTorch. The
// `trainyard` binary runs it for them (users need not call it directly).
#include <iostream>

#include "client/commands.h"

int main(int argc, char** argv) {
  return trainyard::RunTrainyard("trainyard-torch", trainyard::TorchCommands(), argc, argv,
                                 std::cout, std::cerr);
}

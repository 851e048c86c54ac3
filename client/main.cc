// The `trainyard` multi-call binary.
#include <iostream>

#include "client/commands.h"

int main(int argc, char** argv) {
  return trainyard::RunTrainyard("trainyard", trainyard::TrainyardCommands(), argc, argv, std::cout, std::cerr);
}

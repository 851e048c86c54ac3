// Writes known scalars through MetricsManager for rank 0 and rank 1 under
// OUT_DIR/rank0 and OUT_DIR/rank1 (the layout T5X uses: train/ and
// training_eval/<name>/), for read_events.py to check with TensorBoard.
#include <cstdio>

#include "trainer/metrics_manager.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  for (int rank : {0, 1}) {
    const std::string dir = out + "/rank" + std::to_string(rank);
    trainyard::MetricsManager train("train", dir, rank);
    trainyard::MetricsManager eval("training_eval/copy_task", dir, rank);
    for (int step = 10; step <= 30; step += 10) {
      train.WriteScalars(step, {{"loss", 5.0 / step}, {"accuracy", step / 40.0}});
      eval.WriteScalar("loss", 6.0 / step, step);
    }
    train.WriteScalar("learning_rate", 0.125, 30);
    if (!train.Close().ok() || !eval.Close().ok()) return 1;
  }
  return 0;
}

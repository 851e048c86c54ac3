#include "coordinator/goodput.h"

#include <algorithm>

namespace trainyard {

void AccountChunk(int64_t first_step, int64_t steps, double seconds, double data_wait, double checkpoint,
                  Goodput* goodput) {
  if (steps <= 0) return;
  data_wait = std::clamp(data_wait, 0.0, seconds);
  checkpoint = std::clamp(checkpoint, 0.0, seconds - data_wait);
  const double compute = seconds - data_wait - checkpoint;
  const int64_t end = first_step + steps;
  const int64_t fresh = std::clamp<int64_t>(end - std::max(first_step, goodput->trained_to_step()), 0, steps);
  const double share = static_cast<double>(fresh) / static_cast<double>(steps);
  goodput->set_productive_seconds(goodput->productive_seconds() + compute * share);
  goodput->set_recomputed_seconds(goodput->recomputed_seconds() + compute * (1 - share));
  goodput->set_recomputed_steps(goodput->recomputed_steps() + steps - fresh);
  goodput->set_data_wait_seconds(goodput->data_wait_seconds() + data_wait);
  goodput->set_checkpoint_seconds(goodput->checkpoint_seconds() + checkpoint);
  goodput->set_trained_to_step(std::max(goodput->trained_to_step(), end));
}

void FinishGoodput(int64_t create_ms, int64_t end_ms, int64_t now_ms, Goodput* goodput) {
  const int64_t until = end_ms > 0 ? end_ms : now_ms;
  const double wall = std::max<double>(static_cast<double>(until - create_ms) / 1000.0, 0.0);
  const double accounted = goodput->productive_seconds() + goodput->recomputed_seconds() + goodput->recovery_seconds() +
                           goodput->checkpoint_seconds() + goodput->evaluation_seconds() +
                           goodput->data_wait_seconds() + goodput->queued_seconds() + goodput->startup_seconds();
  goodput->set_wall_seconds(wall);
  goodput->set_other_seconds(std::max(wall - accounted, 0.0));
  goodput->set_ratio(wall > 0 ? std::min(goodput->productive_seconds() / wall, 1.0) : 0.0);
}

}  // namespace trainyard

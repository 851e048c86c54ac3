// Peak memory of one training step's gradient accumulation with K
// microbatches: builds the tiny model, accumulates the gradients of one
// batch of 64 examples (inputs/targets of 128 tokens) in K microbatches, and
// prints the process's peak resident memory (VmHWM) in KiB. Run once per K in
// separate processes by peak_memory_test.sh.
//
// usage: peak_memory K
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "trainer/testing/tiny_trainer.h"

namespace {

long PeakRssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainyard;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s K\n", argv[0]);
    return 2;
  }
  const int k = std::atoi(argv[1]);
  TinyTrainerOptions options;
  options.trainer.num_microbatches = k;
  std::unique_ptr<TinyTrainer> tiny = MakeTinyTrainer(options);
  Trainer& trainer = *tiny->trainer;
  torch::manual_seed(0);
  T5Batch b;
  b.encoder_input_tokens = torch::randint(2, 500, {64, 128}, torch::kLong);
  b.decoder_target_tokens = torch::randint(2, 500, {64, 128}, torch::kLong);
  b.decoder_input_tokens = b.decoder_target_tokens.roll(1, 1);
  b.decoder_loss_weights = torch::ones({64, 128});
  const long before = PeakRssKib();
  auto metrics = trainer.AccumulateGradsMicrobatched(b, 0, 64 * 128);
  if (!metrics.ok()) {
    std::fprintf(stderr, "%s\n", metrics.status().ToString().c_str());
    return 1;
  }
  std::printf("{\"microbatches\": %d, \"peak_rss_kib_before\": %ld, \"peak_rss_kib\": %ld}\n", k, before, PeakRssKib());
  return 0;
}

// One optimizer update over a preset's parameters (random gradients), for
// Trainyard's Adafactor and AdamW; bench/peer/optimizer_peer.py times
// PyTorch's AdamW and transformers' Adafactor on the same shapes. Prints one
// JSON line per optimizer: seconds per update (median of --steps).
//
// usage: optimizer_bench --preset NAME [--steps 5] [--threads 1]
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "client/flags.h"
#include "common/blas.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/optimizer.h"

int main(int argc, char** argv) {
  using namespace trainyard;
  ReexecWithTunedBlas(argv);
  std::string preset = "tiny";
  int steps = 5, threads = 1;
  FlagSet flags("optimizer_bench --preset NAME", "Times one optimizer update.");
  flags.AddString("preset", &preset, "NAME", "model preset");
  flags.AddInt("steps", &steps, "N", "timed updates");
  flags.AddInt("threads", &threads, "N", "intra-op threads");
  std::vector<std::string> args(argv + 1, argv + argc), positional;
  if (absl::Status s = flags.Parse(args, &positional); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  at::set_num_threads(threads);
  SetBlasThreads(threads);
  absl::StatusOr<ModelConfig> config = PresetConfig(preset);
  if (!config.ok()) return 2;
  absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, {});
  if (!model.ok()) return 1;
  NamedTensors params;
  int64_t count = 0;
  for (const auto& p : (*model)->named_parameters()) {
    params.emplace_back(p.key(), p.value());
    count += p.value().numel();
  }
  std::vector<torch::Tensor> grads;
  torch::manual_seed(0);
  for (const auto& [name, p] : params) grads.push_back(torch::randn_like(p) * 1e-3);
  for (const char* which : {"adafactor", "adamw"}) {
    OptimizerConfig oc;
    if (std::string(which) == "adafactor") {
      oc.mutable_adafactor();
    } else {
      oc.mutable_adamw();
    }
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = CreateOptimizer(oc, params);
    if (!opt.ok()) return 1;
    torch::NoGradGuard no_grad;
    (*opt)->Apply(grads, 1e-3);  // warm-up: state allocated
    std::vector<double> seconds;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      (*opt)->Apply(grads, 1e-3);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf(
        "{\"system\": \"trainyard\", \"optimizer\": \"%s\", \"preset\": \"%s\", \"parameters\": %lld, "
        "\"threads\": %d, \"seconds_per_update\": %.6f}\n",
        which, preset.c_str(), static_cast<long long>(count), threads, seconds[seconds.size() / 2]);
  }
  return 0;
}

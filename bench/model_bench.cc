// Model throughput: forward+backward tokens/s of a training step (no optimizer)
// and greedy and sampled decoding tokens/s, for one preset. Prints one JSON object per
// measurement on stdout. bench/model/run.sh runs it beside the same model in
// PyTorch eager (bench/model/peer.py) and prints the ratios.
//
// usage: model_bench --preset NAME [--batch 8] [--inputs 128] [--targets 64]
//                    [--steps 5] [--warmup 1] [--decode_length 64] [--threads 1]
//                    [--fused on|off|both]
// --fused: model/fused.h's kernels on (the default), off (the ATen formulas),
// or both: the timed steps alternate between the two in one process, and
// one line is printed for each.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "client/flags.h"
#include "common/blas.h"
#include "model/encoder_decoder_model.h"
#include "model/fused.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Main(const std::vector<std::string>& args) {
  std::string preset = "tiny";
  int batch = 8, inputs = 128, targets = 64, steps = 5, warmup = 1, decode_length = 64, threads = 1;
  FlagSet flags("model_bench --preset NAME", "Model throughput (JSON lines on stdout).");
  flags.AddString("preset", &preset, "NAME", "model preset");
  flags.AddInt("batch", &batch, "N", "examples per step");
  flags.AddInt("inputs", &inputs, "N", "encoder length");
  flags.AddInt("targets", &targets, "N", "decoder length");
  flags.AddInt("steps", &steps, "N", "timed steps");
  flags.AddInt("warmup", &warmup, "N", "untimed steps first");
  flags.AddInt("decode_length", &decode_length, "N", "tokens decoded per example (0: skip)");
  flags.AddInt("threads", &threads, "N", "intra-op threads");
  std::string fused_mode = "on";
  flags.AddString("fused", &fused_mode, "on|off|both",
                  "fused CPU kernels for RMS norm, gated GELU and the loss (model/fused.h)");
  std::vector<std::string> positional;
  if (auto exit_code = flags.ParseCommand(args, &positional, std::cout, std::cerr)) return *exit_code;
  at::set_num_threads(threads);
  std::vector<bool> variants;
  if (fused_mode == "on" || fused_mode == "both") variants.push_back(true);
  if (fused_mode == "off" || fused_mode == "both") variants.push_back(false);
  if (variants.empty()) {
    std::cerr << "--fused: '" << fused_mode << "' is not one of on, off, both\n";
    return 2;
  }

  absl::StatusOr<ModelConfig> config = PresetConfig(preset);
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 2;
  }
  config->set_dropout_rate(0.0f);
  auto model = EncoderDecoderModel::Create(*config, {});
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  torch::manual_seed(0);
  T5Batch b;
  b.encoder_input_tokens = torch::randint(2, config->vocab_size(), {batch, inputs}, torch::kLong);
  b.decoder_target_tokens = torch::randint(2, config->vocab_size(), {batch, targets}, torch::kLong);
  b.decoder_input_tokens = torch::zeros_like(b.decoder_target_tokens);
  b.decoder_input_tokens.narrow(1, 1, targets - 1).copy_(b.decoder_target_tokens.narrow(1, 0, targets - 1));
  b.decoder_loss_weights = torch::ones({batch, targets});

  auto step = [&] {
    for (auto& p : (*model)->parameters()) p.mutable_grad() = torch::Tensor();
    absl::StatusOr<LossOutput> out = (*model)->LossFn(b, LossOptions(), at::Generator());
    if (!out.ok()) {
      std::cerr << out.status() << "\n";
      std::exit(1);
    }
    out->loss.backward();
  };
  for (bool variant : variants) {
    fused::SetEnabled(variant);
    for (int i = 0; i < warmup; ++i) step();
  }
  std::vector<double> seconds(variants.size(), 0.0);
  for (int i = 0; i < steps; ++i) {
    for (size_t v = 0; v < variants.size(); ++v) {
      fused::SetEnabled(variants[v]);
      auto start = std::chrono::steady_clock::now();
      step();
      seconds[v] += Seconds(start);
    }
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    const double train_seconds = seconds[v] / steps;
    std::printf(
        "{\"system\": \"trainyard\", \"preset\": \"%s\", \"measure\": \"train_fwd_bwd\", \"fused\": %s, "
        "\"batch\": %d, \"inputs\": %d, \"targets\": %d, \"threads\": %d, "
        "\"seconds_per_step\": %.6f, \"tokens_per_second\": %.1f}\n",
        preset.c_str(), variants[v] ? "true" : "false", batch, inputs, targets, threads, train_seconds,
        batch * (inputs + targets) / train_seconds);
  }
  std::fflush(stdout);
  fused::SetEnabled(variants.front());

  if (decode_length > 0) {
    // Sampling next to greedy: the same shapes, plus a generator per row.
    for (DecodeOptions::Method method : {DecodeOptions::Method::kGreedy, DecodeOptions::Method::kSample}) {
      DecodeOptions decode;
      decode.method = method;
      decode.max_decode_length = decode_length;
      decode.eos_id = -1;                              // never stop early: every run decodes the same count
      (void)(*model)->PredictBatchWithAux(b, decode);  // warm-up
      auto start = std::chrono::steady_clock::now();
      absl::StatusOr<Predictions> p = (*model)->PredictBatchWithAux(b, decode);
      const double decode_seconds = Seconds(start);
      if (!p.ok()) {
        std::cerr << p.status() << "\n";
        return 1;
      }
      std::printf(
          "{\"system\": \"trainyard\", \"preset\": \"%s\", \"measure\": \"%s_decode\", "
          "\"batch\": %d, \"inputs\": %d, \"decode_length\": %d, \"threads\": %d, "
          "\"seconds\": %.6f, \"tokens_per_second\": %.1f}\n",
          preset.c_str(), method == DecodeOptions::Method::kSample ? "sample" : "greedy", batch, inputs, decode_length,
          threads, decode_seconds, batch * decode_length / decode_seconds);
    }
  }
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  trainyard::ReexecWithTunedBlas(argv);
  return trainyard::Main(std::vector<std::string>(argv + 1, argv + argc));
}

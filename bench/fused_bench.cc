// Each fused kernel of model/fused.h against the ATen formula it replaces,
// forward+backward, at one model's shapes (default: t5_1_1_small with the
// peer benchmark's 16 rows x 32 targets per rank = 512 tokens). The two
// alternate within the run; prints one JSON line per kernel with the median
// seconds of each and the speed-up.
//
//   RmsNorm     x [tokens, d_model]: the production module, fused on/off
//   GatedGelu   a, b [tokens, d_ff]: fused::GatedGelu / gelu(a, "tanh") * b
//   Loss        logits [tokens, vocab]: ComputeLoss (z-loss 1e-4), fused on/off
//
// usage: fused_bench [--tokens 512] [--d_model 512] [--d_ff 1024]
//                    [--vocab 32128] [--reps 20] [--threads 1]
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "client/flags.h"
#include "model/fused.h"
#include "model/loss.h"
#include "model/t5.h"

namespace trainyard {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Times `step` with the fused path on and off, alternating, `reps` times each
// after one warm-up of each.
void Compare(const char* kernel, const std::vector<int64_t>& shape, int reps, const std::function<void()>& step) {
  std::vector<double> on, off;
  for (int i = -1; i < reps; ++i) {
    for (bool fused : {true, false}) {
      fused::SetEnabled(fused);
      const auto start = std::chrono::steady_clock::now();
      step();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (i >= 0) (fused ? on : off).push_back(s);
    }
  }
  fused::SetEnabled(true);
  std::string dims;
  for (int64_t d : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  std::printf(
      "{\"kernel\": \"%s\", \"shape\": [%s], \"reps\": %d, \"fused_seconds\": %.6f, \"unfused_seconds\": %.6f, "
      "\"speedup\": %.3f}\n",
      kernel, dims.c_str(), reps, Median(on), Median(off), Median(off) / Median(on));
  std::fflush(stdout);
}

int Main(const std::vector<std::string>& args) {
  int tokens = 512, d_model = 512, d_ff = 1024, vocab = 32128, reps = 20, threads = 1;
  FlagSet flags("fused_bench", "Fused kernels against their ATen formulas (JSON lines on stdout).");
  flags.AddInt("tokens", &tokens, "N", "rows (batch x length)");
  flags.AddInt("d_model", &d_model, "N", "RMS norm width");
  flags.AddInt("d_ff", &d_ff, "N", "gated GELU width");
  flags.AddInt("vocab", &vocab, "N", "classes of the loss");
  flags.AddInt("reps", &reps, "N", "timed repetitions of each");
  flags.AddInt("threads", &threads, "N", "intra-op threads");
  std::vector<std::string> positional;
  if (auto exit_code = flags.ParseCommand(args, &positional, std::cout, std::cerr)) return *exit_code;
  at::set_num_threads(threads);
  torch::manual_seed(0);

  RmsNorm norm(d_model, 1e-6, torch::TensorOptions().dtype(torch::kFloat));
  {
    torch::NoGradGuard no_grad;
    norm->scale.uniform_(0.5, 1.5);
  }
  const torch::Tensor x = torch::randn({tokens, d_model}).requires_grad_(true);
  const torch::Tensor gx = torch::randn({tokens, d_model});
  Compare("rms_norm", {tokens, d_model}, reps, [&] {
    norm->forward(x, torch::kFloat).backward(gx);
    x.mutable_grad() = torch::Tensor();
    norm->scale.mutable_grad() = torch::Tensor();
  });

  const torch::Tensor a = torch::randn({tokens, d_ff}).requires_grad_(true);
  const torch::Tensor b = torch::randn({tokens, d_ff}).requires_grad_(true);
  const torch::Tensor gy = torch::randn({tokens, d_ff});
  Compare("gated_gelu", {tokens, d_ff}, reps, [&] {
    torch::Tensor y = fused::GatedGeluApplies(a, b) ? fused::GatedGelu(a, b) : torch::gelu(a, "tanh") * b;
    y.backward(gy);
    a.mutable_grad() = torch::Tensor();
    b.mutable_grad() = torch::Tensor();
  });

  const torch::Tensor logits = (torch::randn({1, tokens, vocab}) * 4.0).requires_grad_(true);
  const torch::Tensor targets = torch::randint(0, vocab, {1, tokens}, torch::kLong);
  const torch::Tensor weights = torch::ones({1, tokens});
  Compare("loss", {tokens, vocab}, reps, [&] {
    LossOutput out = ComputeLoss(logits, targets, weights, LossOptions());
    out.loss.backward();
    logits.mutable_grad() = torch::Tensor();
  });
  return 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) { return trainyard::Main(std::vector<std::string>(argv + 1, argv + argc)); }

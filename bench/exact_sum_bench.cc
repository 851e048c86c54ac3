// The precision and cost of trainer/exact_sum.h on real gradients: a
// preset's per-microbatch gradients (random weights and batches, dropout
// off) summed three ways, each against the float64 sum of the same terms:
// float32 in order (one rank accumulating every microbatch), float32 over
// `--ranks` groups then across them (what a data-parallel step adds), and
// the exact fixed-point sum (the same bits for any grouping). Prints one
// JSON line per way: the largest error relative to the largest value of
// its tensor (the worst tensor), the median such error over the values
// above 1e-3 of their tensor's largest, and the seconds per term added.
//
// usage: exact_sum_bench [--preset tiny] [--microbatches 16] [--rows 4] [--ranks 3]
#include <ATen/CPUGeneratorImpl.h>
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
#include "trainer/exact_sum.h"

namespace trainyard {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

T5Batch RandomBatch(int rows, int64_t vocab) {
  T5Batch b;
  b.encoder_input_tokens = torch::randint(2, vocab, {rows, 32}, torch::kLong);
  b.decoder_target_tokens = torch::randint(2, vocab, {rows, 16}, torch::kLong);
  b.decoder_input_tokens = torch::zeros_like(b.decoder_target_tokens);
  b.decoder_input_tokens.narrow(1, 1, 15).copy_(b.decoder_target_tokens.narrow(1, 0, 15));
  b.decoder_loss_weights = torch::ones({rows, 16});
  return b;
}

// The worst tensor's largest |got - exact| / max |exact|, and the median of
// |got - exact| / |exact| over values above 1e-3 of their tensor's largest.
std::pair<double, double> Errors(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& exact) {
  double worst = 0;
  std::vector<torch::Tensor> relative;
  for (size_t i = 0; i < got.size(); ++i) {
    const double largest = exact[i].abs().max().item<double>();
    if (largest == 0) continue;
    const torch::Tensor error = (got[i].to(torch::kDouble) - exact[i]).abs();
    worst = std::max(worst, error.max().item<double>() / largest);
    const torch::Tensor big = exact[i].abs().gt(1e-3 * largest);
    relative.push_back((error.masked_select(big) / exact[i].abs().masked_select(big)).flatten());
  }
  const torch::Tensor all = torch::cat(relative);
  return {worst, all.median().item<double>()};
}

int Main(int argc, char** argv) {
  std::string preset = "tiny";
  int microbatches = 16, rows = 4, ranks = 3;
  FlagSet flags("exact_sum_bench", "Precision and cost of the exact sum on a preset's gradients.");
  flags.AddString("preset", &preset, "NAME", "model preset");
  flags.AddInt("microbatches", &microbatches, "N", "terms of the sum");
  flags.AddInt("rows", &rows, "N", "rows per microbatch");
  flags.AddInt("ranks", &ranks, "N", "groups of the float32 data-parallel sum");
  std::vector<std::string> args(argv + 1, argv + argc), positional;
  if (absl::Status s = flags.Parse(args, &positional); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  at::set_num_threads(1);
  SetBlasThreads(1);
  absl::StatusOr<ModelConfig> config = PresetConfig(preset);
  if (!config.ok()) return 2;
  config->set_dropout_rate(0.0f);
  absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, {});
  if (!model.ok()) return 1;
  std::vector<torch::Tensor> params;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : (*model)->named_parameters()) {
    params.push_back(p.value());
    shapes.push_back(p.value().sizes().vec());
  }
  torch::manual_seed(0);
  std::vector<std::vector<torch::Tensor>> terms;  // per microbatch, per parameter
  for (int j = 0; j < microbatches; ++j) {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    absl::StatusOr<LossOutput> out = (*model)->LossFn(RandomBatch(rows, config->vocab_size()), LossOptions(),
                                                      at::make_generator<at::CPUGeneratorImpl>(j));
    if (!out.ok()) return 1;
    out->loss.backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().clone());
    terms.push_back(grads);
  }
  std::vector<torch::Tensor> exact, in_order, grouped;
  for (size_t i = 0; i < params.size(); ++i) {
    exact.push_back(torch::zeros(shapes[i], torch::kDouble));
    in_order.push_back(torch::zeros(shapes[i]));
    grouped.push_back(torch::zeros(shapes[i]));
  }
  auto start = std::chrono::steady_clock::now();
  for (const auto& term : terms) {
    for (size_t i = 0; i < params.size(); ++i) in_order[i] += term[i];
  }
  const double float_seconds = Seconds(start) / microbatches;
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor part = torch::zeros(shapes[i]);
      for (int j = r * microbatches / ranks; j < (r + 1) * microbatches / ranks; ++j) part += terms[j][i];
      grouped[i] += part;
    }
  }
  for (const auto& term : terms) {
    for (size_t i = 0; i < params.size(); ++i) exact[i] += term[i].to(torch::kDouble);
  }
  ExactSum sum(shapes, microbatches);
  std::vector<int> exponents;
  for (const torch::Tensor& t : exact) exponents.push_back(MagnitudeExponent(t) + 2);
  // The scale from the sum's own largest values (as a step's previous sum
  // would give it) plus headroom 2; a term larger than that overflows.
  for (int& e : exponents) e = std::clamp(e, kExactSumMinExponent, kExactSumMaxExponent);
  if (!sum.Reset(exponents).ok()) return 1;
  start = std::chrono::steady_clock::now();
  for (const auto& term : terms) {
    if (!sum.Add(term).ok()) return 1;
  }
  const double exact_seconds = Seconds(start) / microbatches;
  const bool overflowed = sum.Overflowed();
  const std::vector<torch::Tensor> fixed = sum.ToFloat();
  int64_t count = 0;
  for (const auto& t : params) count += t.numel();
  auto print = [&](const char* way, const std::vector<torch::Tensor>& got, double seconds) {
    const auto [worst, median] = Errors(got, exact);
    std::printf(
        "{\"bench\": \"exact_sum\", \"preset\": \"%s\", \"parameters\": %ld, \"microbatches\": %d, \"ranks\": %d, "
        "\"way\": \"%s\", \"worst_error_of_largest\": %.3e, \"median_relative_error\": %.3e, "
        "\"seconds_per_term\": %.6f, \"overflowed\": %s}\n",
        preset.c_str(), static_cast<long>(count), microbatches, ranks, way, worst, median, seconds,
        overflowed ? "true" : "false");
  };
  print("float32_in_order", in_order, float_seconds);
  print("float32_over_ranks", grouped, 0);
  print("exact", fixed, exact_seconds);
  return overflowed ? 1 : 0;
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  trainyard::ReexecWithTunedBlas(argv);
  return trainyard::Main(argc, argv);
}

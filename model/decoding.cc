#include "model/decoding.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/random.h"

namespace trainyard {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

ForwardOptions InferenceOptions(const DecodeOptions& options) {
  ForwardOptions forward;
  forward.compute_dtype = options.compute_dtype;
  return forward;
}

// Row i's token at step t, drawn from `probs` (its row sums to 1, up to
// rounding) by inverse CDF with a uniform number that depends on row i's
// seed and t only: counter-based, so a row samples the same tokens
// whatever else its batch holds. A token of zero probability is never
// drawn (the target lies strictly below the row's total).
torch::Tensor SampleRows(const torch::Tensor& probs, const std::vector<uint64_t>& row_seeds, int64_t t) {
  const int64_t b = probs.size(0);
  torch::Tensor uniform = torch::empty({b, 1}, torch::kDouble);
  double* u = uniform.data_ptr<double>();
  for (int64_t i = 0; i < b; ++i) {
    // The top 53 bits of a mixed (seed, step) counter: uniform in [0, 1).
    u[i] = static_cast<double>(SplitMix64(row_seeds[i] ^ SplitMix64(static_cast<uint64_t>(t))) >> 11) * 0x1.0p-53;
  }
  const torch::Tensor cdf = probs.to(torch::kDouble).cumsum(-1);
  const torch::Tensor target = uniform * cdf.narrow(1, cdf.size(1) - 1, 1);
  // The product can round up to the total itself: then the last token with
  // any probability.
  const torch::Tensor last_possible = (probs.size(1) - 1) - probs.gt(0).flip({1}).to(torch::kInt).argmax(-1);
  return torch::minimum(cdf.le(target).sum(-1), last_possible);
}

// Greedy decoding and sampling: one token per row per step.
DecodeResult DecodeOneAtATime(T5Impl& model, const torch::Tensor& inputs, const DecodeOptions& options) {
  const int64_t b = inputs.size(0);
  const int64_t len = options.max_decode_length;
  const ForwardOptions forward = InferenceOptions(options);
  DecodeState state = model.StartDecoding(inputs, len, forward);
  const auto long_options = inputs.options();
  torch::Tensor tokens = torch::zeros({b, len}, long_options);
  torch::Tensor scores = torch::zeros({b}, inputs.options().dtype(torch::kFloat));
  torch::Tensor finished = torch::zeros({b}, long_options.dtype(torch::kBool));
  torch::Tensor current = torch::zeros({b}, long_options);  // decoder input starts with 0
  const bool sample = options.method == DecodeOptions::Method::kSample;
  std::vector<uint64_t> row_seeds;  // sampling: row i's
  for (int64_t i = 0; sample && i < b; ++i) {
    const uint64_t key = options.row_keys.empty() ? static_cast<uint64_t>(i) : options.row_keys[i];
    row_seeds.push_back(RowSeed(options.seed, key));
  }

  for (int64_t t = 0; t < len; ++t) {
    const torch::Tensor logits = model.DecodeStep(current, &state, forward);
    const torch::Tensor log_probs = torch::log_softmax(logits, -1);
    torch::Tensor next;
    if (!sample) {
      next = logits.argmax(-1);
    } else {
      torch::Tensor adjusted = logits / options.temperature;
      if (options.top_k > 0 && options.top_k < adjusted.size(-1)) {
        const torch::Tensor kth = std::get<0>(adjusted.topk(options.top_k, -1)).narrow(-1, options.top_k - 1, 1);
        adjusted = adjusted.masked_fill(adjusted.lt(kth), kNegInf);
      }
      if (options.top_p > 0.0 && options.top_p < 1.0) {
        auto [sorted, order] = adjusted.sort(-1, /*descending=*/true);
        const torch::Tensor probs = torch::softmax(sorted, -1);
        // Drop a token when the mass before it already reaches top_p; the
        // most likely token always stays.
        const torch::Tensor drop = (probs.cumsum(-1) - probs).gt(options.top_p);
        adjusted = adjusted.scatter(-1, order, sorted.masked_fill(drop, kNegInf));
      }
      const torch::Tensor probs = torch::softmax(adjusted, -1).to(torch::kCPU);
      next = SampleRows(probs, row_seeds, t).to(logits.device());
    }
    next = next.masked_fill(finished, 0);
    const torch::Tensor token_log_prob = log_probs.gather(-1, next.unsqueeze(-1)).squeeze(-1);
    scores = scores + token_log_prob.masked_fill(finished, 0.0f);
    tokens.select(1, t).copy_(next);
    finished = finished.logical_or(next.eq(options.eos_id));
    current = next;
    if (finished.all().item<bool>()) break;
  }
  return {tokens, scores};
}

DecodeResult BeamSearch(T5Impl& model, const torch::Tensor& inputs, const DecodeOptions& options) {
  const int64_t b = inputs.size(0);
  const int64_t k = options.beam_size;
  const int64_t len = options.max_decode_length;
  const ForwardOptions forward = InferenceOptions(options);
  const auto long_options = inputs.options();
  const auto float_options = inputs.options().dtype(torch::kFloat);

  // Every row's beams start identical; only beam 0 is live at first so the
  // first step does not pick the same token K times.
  DecodeState state = model.StartDecoding(inputs.repeat_interleave(k, 0), len, forward);
  torch::Tensor alive_seq = torch::zeros({b, k, len}, long_options);
  torch::Tensor alive_logp = torch::full({b, k}, kNegInf, float_options);
  alive_logp.select(1, 0).fill_(0.0f);
  torch::Tensor finished_seq = torch::zeros({b, k, len}, long_options);
  torch::Tensor finished_score = torch::full({b, k}, kNegInf, float_options);
  torch::Tensor current = torch::zeros({b * k}, long_options);
  const torch::Tensor batch_offset = (torch::arange(b, long_options) * k).unsqueeze(1);

  for (int64_t t = 0; t < len; ++t) {
    const torch::Tensor log_probs = torch::log_softmax(model.DecodeStep(current, &state, forward), -1);
    const int64_t vocab = log_probs.size(-1);
    const torch::Tensor candidates = (alive_logp.unsqueeze(-1) + log_probs.view({b, k, vocab})).view({b, k * vocab});
    // 2K candidates guarantee K that do not end here.
    auto [top_logp, top_index] = candidates.topk(std::min<int64_t>(2 * k, k * vocab), -1);
    const torch::Tensor beam = top_index.div(vocab, "floor");
    const torch::Tensor token = top_index.remainder(vocab);
    torch::Tensor seq = alive_seq.gather(1, beam.unsqueeze(-1).expand({b, beam.size(1), len})).clone();
    seq.select(2, t).copy_(token);
    const torch::Tensor is_eos = token.eq(options.eos_id);

    // Finished: EOS candidates, scored with the length penalty, merged with
    // the best so far.
    const torch::Tensor new_finished_score =
        (top_logp / static_cast<float>(LengthPenalty(t + 1, options.alpha))).masked_fill(is_eos.logical_not(), kNegInf);
    auto [best_finished, best_finished_index] = torch::cat({finished_score, new_finished_score}, 1).topk(k, -1);
    const torch::Tensor all_finished_seq = torch::cat({finished_seq, seq}, 1);
    finished_seq = all_finished_seq.gather(1, best_finished_index.unsqueeze(-1).expand({b, k, len}));
    finished_score = best_finished;

    // Alive: the K best that did not end.
    auto [best_alive, best_alive_index] = top_logp.masked_fill(is_eos, kNegInf).topk(k, -1);
    alive_seq = seq.gather(1, best_alive_index.unsqueeze(-1).expand({b, k, len}));
    alive_logp = best_alive;
    const torch::Tensor parent = beam.gather(1, best_alive_index);
    state.Reorder((batch_offset + parent).view({-1}));
    current = alive_seq.select(2, t).reshape({-1});

    // Done when no alive beam can still beat the worst kept finished one:
    // log-probabilities only fall, and the penalty is largest at max length.
    const torch::Tensor best_possible = alive_logp.select(1, 0) / static_cast<float>(LengthPenalty(len, options.alpha));
    const torch::Tensor worst_finished = finished_score.select(1, k - 1);
    if (best_possible.lt(worst_finished).all().item<bool>()) break;
  }
  // Rows with no finished beam return their best alive one.
  const torch::Tensor has_finished = finished_score.select(1, 0).gt(kNegInf);
  const torch::Tensor alive_score = alive_logp.select(1, 0) / static_cast<float>(LengthPenalty(len, options.alpha));
  torch::Tensor tokens = torch::where(has_finished.view({b, 1}), finished_seq.select(1, 0), alive_seq.select(1, 0));
  torch::Tensor scores = torch::where(has_finished, finished_score.select(1, 0), alive_score);
  return {tokens, scores};
}

}  // namespace

uint64_t RowSeed(uint64_t seed, uint64_t key) { return SplitMix64(seed ^ SplitMix64(key)); }

double LengthPenalty(int64_t length, double alpha) {
  return std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

DecodeResult Decode(T5Impl& model, const torch::Tensor& encoder_input_tokens, const DecodeOptions& options) {
  if (options.method == DecodeOptions::Method::kBeam) {
    return BeamSearch(model, encoder_input_tokens, options);
  }
  return DecodeOneAtATime(model, encoder_input_tokens, options);
}

}  // namespace trainyard

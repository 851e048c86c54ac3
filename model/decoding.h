// Autoregressive decoding over a T5's key/value caches: greedy, beam search
// (T5X's length penalty ((5 + length) / 6)^alpha) and sampling (temperature,
// top-k, top-p), each row's draws keyed by the seed, the row's key (the
// example's place in its split or request) and the step, so an example samples
// the same text whatever batch, rank or number of workers decodes it.
// Every method stops a row at EOS and stops the batch when all rows have
// stopped.
//
// Callers hold a torch::NoGradGuard (decoding never needs gradients).
#ifndef TRAINYARD_MODEL_DECODING_H_
#define TRAINYARD_MODEL_DECODING_H_

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "model/t5.h"

namespace trainyard {

struct DecodeOptions {
  enum class Method { kGreedy, kBeam, kSample };
  Method method = Method::kGreedy;
  int64_t max_decode_length = 32;
  int64_t eos_id = 1;
  int beam_size = 4;
  double alpha = 0.6;        // beam length penalty exponent
  double temperature = 1.0;  // sampling
  int64_t top_k = 0;         // 0: off
  double top_p = 0.0;        // 0: off
  uint64_t seed = 0;         // sampling
  // Sampling: row i's key (RowSeed); empty: row i's key is i. One per row
  // of the decoded batch otherwise (kInvalidArgument from the model).
  std::vector<uint64_t> row_keys;
  torch::ScalarType compute_dtype = torch::kFloat32;
};

struct DecodeResult {
  // [B, max_decode_length]: generated tokens up to and including EOS, then 0.
  torch::Tensor tokens;
  // [B] float32: the sequence's log-probability under the model (sum over its
  // tokens, EOS included); for beam search, divided by the length penalty.
  torch::Tensor scores;
};

DecodeResult Decode(T5Impl& model, const torch::Tensor& encoder_input_tokens, const DecodeOptions& options);

// The seed of the draws of a row with `key` (counter-based: one uniform
// number per step).
uint64_t RowSeed(uint64_t seed, uint64_t key);

// T5X's brevity penalty: ((5 + length) / 6) ^ alpha.
double LengthPenalty(int64_t length, double alpha);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_DECODING_H_

// T5's span-corruption objective (seqio's span_corruption preprocessor):
// a random subset of the tokens, in spans, is replaced in the inputs by one
// sentinel per span (<extra_id_0>, <extra_id_1>, ...), and the targets are
// each sentinel followed by the tokens it replaced.
//
// The noise is exactly round(length * noise_density) tokens (at least 1, at
// most length - 1) in round(noise / mean_noise_span_length) spans (at least
// 1); span lengths are a uniformly random composition of those counts, and
// noise and non-noise spans alternate, starting with non-noise and (as in
// T5) ending with noise.
#ifndef TRAINYARD_DATA_SPAN_CORRUPTION_H_
#define TRAINYARD_DATA_SPAN_CORRUPTION_H_

#include <cstdint>
#include <random>
#include <vector>

#include "data/feature_converter.h"

namespace trainyard {

// The noise mask of a sequence of `length` tokens (true: noise).
std::vector<bool> RandomSpansNoiseMask(int64_t length, double noise_density, double mean_noise_span_length,
                                       std::mt19937_64* rng);

// Corrupts `tokens` (without EOS): inputs and targets as above, each followed
// by EOS. `first_sentinel` is the id of <extra_id_0>; later sentinels count
// down from it.
TokenizedExample SpanCorrupt(const std::vector<int32_t>& tokens, int32_t first_sentinel, double noise_density,
                             double mean_noise_span_length, std::mt19937_64* rng);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_SPAN_CORRUPTION_H_

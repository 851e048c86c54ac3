#include "data/span_corruption.h"

#include <algorithm>
#include <cmath>

#include "data/vocabulary.h"

namespace trainyard {
namespace {

// A uniformly random composition of `items` into `segments` positive parts.
std::vector<int64_t> RandomSegmentation(int64_t items, int64_t segments, std::mt19937_64* rng) {
  // Choose segments - 1 distinct cut points among items - 1 gaps.
  std::vector<int64_t> gaps(static_cast<size_t>(items - 1));
  for (int64_t i = 0; i < items - 1; ++i) gaps[i] = i + 1;
  for (int64_t i = 0; i < segments - 1; ++i) {  // partial Fisher-Yates
    const int64_t j = i + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(items - 1 - i));
    std::swap(gaps[i], gaps[j]);
  }
  std::vector<int64_t> cuts(gaps.begin(), gaps.begin() + (segments - 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> lengths;
  int64_t previous = 0;
  for (int64_t c : cuts) {
    lengths.push_back(c - previous);
    previous = c;
  }
  lengths.push_back(items - previous);
  return lengths;
}

}  // namespace

std::vector<bool> RandomSpansNoiseMask(int64_t length, double noise_density, double mean_noise_span_length,
                                       std::mt19937_64* rng) {
  const int64_t original = length;
  length = std::max<int64_t>(length, 2);
  int64_t noise = static_cast<int64_t>(std::llround(static_cast<double>(length) * noise_density));
  noise = std::min(std::max<int64_t>(noise, 1), length - 1);
  int64_t spans =
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(noise) / mean_noise_span_length)));
  spans = std::min(spans, std::min(noise, length - noise));
  const std::vector<int64_t> noise_lengths = RandomSegmentation(noise, spans, rng);
  const std::vector<int64_t> keep_lengths = RandomSegmentation(length - noise, spans, rng);
  std::vector<bool> mask;
  for (int64_t s = 0; s < spans; ++s) {
    mask.insert(mask.end(), static_cast<size_t>(keep_lengths[s]), false);
    mask.insert(mask.end(), static_cast<size_t>(noise_lengths[s]), true);
  }
  mask.resize(static_cast<size_t>(original));
  return mask;
}

TokenizedExample SpanCorrupt(const std::vector<int32_t>& tokens, int32_t first_sentinel, double noise_density,
                             double mean_noise_span_length, std::mt19937_64* rng) {
  const std::vector<bool> mask =
      RandomSpansNoiseMask(static_cast<int64_t>(tokens.size()), noise_density, mean_noise_span_length, rng);
  TokenizedExample out;
  int32_t sentinel = first_sentinel;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool starts_span = mask[i] && (i == 0 || !mask[i - 1]);
    if (!mask[i]) {
      out.inputs.push_back(tokens[i]);
    } else {
      if (starts_span) {
        out.inputs.push_back(sentinel);
        out.targets.push_back(sentinel);
        --sentinel;
      }
      out.targets.push_back(tokens[i]);
    }
  }
  out.inputs.push_back(Vocabulary::kEosId);
  out.targets.push_back(Vocabulary::kEosId);
  return out;
}

}  // namespace trainyard

// Seed derivation: SplitMix64, a fast bijective mixer. Seeds of per-step,
// per-rank and per-epoch generators are derived by mixing their coordinates,
// so every random choice is a function of the job's seed alone.
#ifndef TRAINYARD_COMMON_RANDOM_H_
#define TRAINYARD_COMMON_RANDOM_H_

#include <cstdint>

namespace trainyard {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_RANDOM_H_

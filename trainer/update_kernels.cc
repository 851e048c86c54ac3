#include "trainer/update_kernels.h"

#include <cmath>

namespace trainyard {
namespace {

#if defined(__x86_64__) && !defined(__clang__)
#define TY_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TY_CLONES
#endif
#define TY_INLINE inline __attribute__((always_inline))

// The decay test hoisted out of the loop, so the loop body has no branch.
template <bool kDecay>
TY_INLINE void AdamWLoop(const AdamWConstants& c, float* __restrict p, const float* __restrict g, float* __restrict m,
                         float* __restrict v, int64_t begin, int64_t end) {
  const float keep1 = c.keep1, add1 = c.add1, keep2 = c.keep2, add2 = c.add2;
  const float correct1 = c.correct1, correct2 = c.correct2, eps = c.eps, decay = c.decay, rate = c.rate;
  for (int64_t k = begin; k < end; ++k) {
    const float gk = g[k];
    const float mk = keep1 * m[k] + add1 * gk;
    const float vk = keep2 * v[k] + add2 * (gk * gk);
    m[k] = mk;
    v[k] = vk;
    float u = (mk / correct1) / (std::sqrt(vk / correct2) + eps);
    if (kDecay) u += decay * p[k];
    p[k] -= u * rate;
  }
}

template <bool kDecay>
TY_INLINE void FactoredLoop(const float* __restrict g, const float* __restrict r, const float* __restrict c, float k,
                            float decay, float* __restrict p, int64_t cols, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float* __restrict gi = g + i * cols;
    float* __restrict pi = p + i * cols;
    const float ri = r[i];
    for (int64_t j = 0; j < cols; ++j) {
      float u = gi[j] * ri * c[j] * k;
      if (kDecay) u += decay * pi[j];
      pi[j] -= u;
    }
  }
}

TY_INLINE double AddLanes(const double* a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }
static_assert(kSumLanes == 8, "AddLanes adds 8 lanes");

}  // namespace

TY_CLONES double FactoredMomentsRows(const float* __restrict g, const float* __restrict p, float eps1, int64_t cols,
                                     int64_t begin, int64_t end, double* __restrict row_sums,
                                     double* __restrict col_sums) {
  double p2[kSumLanes] = {};
  const int64_t whole = cols / kSumLanes * kSumLanes;
  for (int64_t i = begin; i < end; ++i) {
    const float* __restrict gi = g + i * cols;
    const float* __restrict pi = p + i * cols;
    double row[kSumLanes] = {};
    for (int64_t j = 0; j < whole; j += kSumLanes) {
      for (int l = 0; l < kSumLanes; ++l) {
        const float x = gi[j + l] * gi[j + l] + eps1;
        row[l] += x;
        col_sums[j + l] += x;
        p2[l] += static_cast<double>(pi[j + l]) * pi[j + l];
      }
    }
    for (int64_t j = whole; j < cols; ++j) {
      const float x = gi[j] * gi[j] + eps1;
      row[j - whole] += x;
      col_sums[j] += x;
      p2[j - whole] += static_cast<double>(pi[j]) * pi[j];
    }
    row_sums[i] = AddLanes(row);
  }
  return AddLanes(p2);
}

TY_CLONES double FactoredUpdateSquaresRows(const float* __restrict g, const float* __restrict r,
                                           const float* __restrict c, int64_t cols, int64_t begin, int64_t end) {
  double u2[kSumLanes] = {};
  const int64_t whole = cols / kSumLanes * kSumLanes;
  for (int64_t i = begin; i < end; ++i) {
    const float* __restrict gi = g + i * cols;
    const float ri = r[i];
    for (int64_t j = 0; j < whole; j += kSumLanes) {
      for (int l = 0; l < kSumLanes; ++l) {
        const float u = gi[j + l] * ri * c[j + l];
        u2[l] += static_cast<double>(u) * u;
      }
    }
    for (int64_t j = whole; j < cols; ++j) {
      const float u = gi[j] * ri * c[j];
      u2[j - whole] += static_cast<double>(u) * u;
    }
  }
  return AddLanes(u2);
}

TY_CLONES void AdamWRange(const AdamWConstants& c, float* p, const float* g, float* m, float* v, int64_t begin,
                          int64_t end) {
  if (c.decay > 0) {
    AdamWLoop<true>(c, p, g, m, v, begin, end);
  } else {
    AdamWLoop<false>(c, p, g, m, v, begin, end);
  }
}

TY_CLONES void FactoredUpdateRows(const float* g, const float* r, const float* c, float k, float decay, float* p,
                                  int64_t cols, int64_t begin, int64_t end) {
  if (decay > 0) {
    FactoredLoop<true>(g, r, c, k, decay, p, cols, begin, end);
  } else {
    FactoredLoop<false>(g, r, c, k, decay, p, cols, begin, end);
  }
}

}  // namespace trainyard

#include "model/fused_kernels.h"

#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "model/fused.h"

namespace trainyard {
namespace fused {
namespace {

#define TY_INLINE inline __attribute__((always_inline))
// Each hot loop is compiled three times and the best one for the CPU is
// chosen when the library loads. The arithmetic is the same in every clone
// (no contraction into FMA: -ffp-contract=off in BUILD, no reassociation),
// so results do not depend on the machine.
#if defined(__x86_64__) && !defined(__clang__)
#define TY_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TY_CLONES
#endif

// Reductions keep this many partial results (one AVX-512 register of
// float32), combined in index order at the end.
constexpr int kLanes = 16;

TY_INLINE float ToAcc(float x) { return x; }
TY_INLINE double ToAcc(double x) { return x; }
TY_INLINE float ToAcc(c10::BFloat16 x) { return static_cast<float>(x); }
template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};

// e^x in float32 without a libm call, so that loops over it vectorise:
// x = n ln 2 + r with |r| <= ln2 / 2, e^r by its degree-7 Taylor polynomial
// (truncation below 1.2e-8 relative), 2^n written into the exponent bits.
// 0 below -87.3 (where e^x is subnormal or 0), saturates above 88.3, NaN
// stays NaN.
TY_INLINE float Exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // few mantissa bits: n * hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float c = x < -87.3f ? -87.3f : x;
  c = c > 88.3f ? 88.3f : c;
  const float t = c * kLog2e + kShifter;
  const float n = t - kShifter;
  uint32_t t_bits, shifter_bits;
  std::memcpy(&t_bits, &t, sizeof(t));
  std::memcpy(&shifter_bits, &kShifter, sizeof(kShifter));
  const uint32_t biased = (t_bits - shifter_bits + 127u) << 23;
  float two_n;
  std::memcpy(&two_n, &biased, sizeof(two_n));
  float r = c - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float e = p * two_n;
  return x < -87.3f ? 0.0f : e;
}
TY_INLINE double Exp(double x) { return std::exp(x); }

template <typename A>
struct GeluConstants {
  static constexpr A kSqrt2OverPi = static_cast<A>(0.79788456080286535588);
  static constexpr A kCubic = static_cast<A>(0.044715);
};

template <typename A>
TY_INLINE A RowMax(const A* x, int64_t n) {
  A m = -std::numeric_limits<A>::infinity();
  int64_t i = 0;
  if (n >= kLanes) {
    A acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = x[j];
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    }
    for (int j = 0; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// sum_i e^(x_i - shift), and sum_i x_i when `sum` is not null.
template <typename A>
TY_INLINE A RowExpSum(const A* x, int64_t n, A shift, A* sum) {
  A acc[kLanes] = {}, lin[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += Exp(x[i + j] - shift);
    if (sum != nullptr) {
      for (int j = 0; j < kLanes; ++j) lin[j] += x[i + j];
    }
  }
  A s = 0, l = 0;
  for (int j = 0; j < kLanes; ++j) {
    s += acc[j];
    l += lin[j];
  }
  for (; i < n; ++i) {
    s += Exp(x[i] - shift);
    l += x[i];
  }
  if (sum != nullptr) *sum = l;
  return s;
}

template <typename T, typename A = typename AccOf<T>::type>
TY_INLINE A RowSumSquares(const T* x, int64_t n) {
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const A v = ToAcc(x[i + j]);
      acc[j] += v * v;
    }
  }
  A s = 0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) {
    const A v = ToAcc(x[i]);
    s += v * v;
  }
  return s;
}

// ---- RMS norm ----

template <typename T, typename A = typename AccOf<T>::type>
TY_INLINE void RmsNormForwardRows(const T* x, const A* scale, A epsilon, int64_t begin, int64_t end, int64_t d, T* y,
                                  A* rstd) {
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const A inv = A(1) / std::sqrt(RowSumSquares(xr, d) / static_cast<A>(d) + epsilon);
    rstd[r] = inv;
    for (int64_t i = 0; i < d; ++i) yr[i] = static_cast<T>(ToAcc(xr[i]) * inv * scale[i]);
  }
}

// dx = rstd (w - xhat mean(w xhat)), w = g scale, xhat = x rstd; the scale's
// gradient sum_rows g xhat of rows [begin, end) is added to `dscale_part`.
template <typename T, typename A = typename AccOf<T>::type>
TY_INLINE void RmsNormBackwardRows(const T* x, const T* g, const A* scale, const A* rstd, int64_t begin, int64_t end,
                                   int64_t d, T* dx, A* dscale_part) {
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * d;
    const T* gr = g + r * d;
    const A inv = rstd[r];
    A acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= d; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) acc[j] += ToAcc(gr[i + j]) * scale[i + j] * (ToAcc(xr[i + j]) * inv);
    }
    A dot = 0;
    for (int j = 0; j < kLanes; ++j) dot += acc[j];
    for (; i < d; ++i) dot += ToAcc(gr[i]) * scale[i] * (ToAcc(xr[i]) * inv);
    const A mean = dot / static_cast<A>(d);
    if (dx != nullptr) {
      T* dxr = dx + r * d;
      for (int64_t k = 0; k < d; ++k) {
        const A xhat = ToAcc(xr[k]) * inv;
        dxr[k] = static_cast<T>(inv * (ToAcc(gr[k]) * scale[k] - xhat * mean));
      }
    }
    if (dscale_part != nullptr) {
      for (int64_t k = 0; k < d; ++k) dscale_part[k] += ToAcc(gr[k]) * (ToAcc(xr[k]) * inv);
    }
  }
}

// ---- Gated GELU ----

// With E = e^(2w), w = sqrt(2/pi) (u + 0.044715 u^3), and s = E / (E + 1):
// gelu(u) = u (1 + tanh w) / 2 = u s, and 1 - tanh(w)^2 = 4 s (1 - s), each
// without the cancellation of 1 +- tanh near the tails. 2w is clamped to
// [-80, 80], where s is 0 or 1 to float64's precision.
template <typename A>
TY_INLINE void GeluParts(A u, A* s, A* one_minus_s) {
  using C = GeluConstants<A>;
  A w2 = A(2) * C::kSqrt2OverPi * (u + C::kCubic * u * u * u);
  w2 = w2 < A(-80) ? A(-80) : w2;
  w2 = w2 > A(80) ? A(80) : w2;
  const A e = Exp(w2);
  const A inv = A(1) / (e + A(1));
  *s = e * inv;
  *one_minus_s = inv;
}

template <typename T, typename A = typename AccOf<T>::type>
TY_INLINE void GatedGeluForwardRange(const T* a, const T* b, int64_t begin, int64_t end, T* y) {
  for (int64_t i = begin; i < end; ++i) {
    const A u = ToAcc(a[i]);
    A s, one_minus_s;
    GeluParts(u, &s, &one_minus_s);
    y[i] = static_cast<T>(u * s * ToAcc(b[i]));
  }
}

template <typename T, typename A = typename AccOf<T>::type>
TY_INLINE void GatedGeluBackwardRange(const T* a, const T* b, const T* g, int64_t begin, int64_t end, T* da, T* db) {
  using C = GeluConstants<A>;
  for (int64_t i = begin; i < end; ++i) {
    const A u = ToAcc(a[i]);
    const A gi = ToAcc(g[i]);
    A s, one_minus_s;
    GeluParts(u, &s, &one_minus_s);
    const A dgelu = s + A(2) * u * s * one_minus_s * C::kSqrt2OverPi * (A(1) + A(3) * C::kCubic * u * u);
    da[i] = static_cast<T>(gi * ToAcc(b[i]) * dgelu);
    db[i] = static_cast<T>(gi * (u * s));
  }
}

// ---- Cross-entropy with z-loss ----

template <typename A>
TY_INLINE void CrossEntropyForwardRows(const A* logits, const int64_t* targets, int64_t begin, int64_t end, int64_t v,
                                       double z_loss, double confidence, double low, double entropy, A* loss, A* log_z,
                                       int64_t* argmax) {
  for (int64_t r = begin; r < end; ++r) {
    const A* l = logits + r * v;
    const A m = RowMax(l, v);
    A sum = 0;
    const A s = RowExpSum(l, v, m, low > 0.0 ? &sum : nullptr);
    const A lz = m + std::log(s);
    log_z[r] = lz;
    int64_t best = 0;
    for (int64_t i = 0; i < v; ++i) {
      if (l[i] == m) {
        best = i;
        break;
      }
    }
    argmax[r] = best;
    const double target_log_prob = static_cast<double>(l[targets[r]]) - static_cast<double>(lz);
    double token = -target_log_prob;
    if (low > 0.0) {
      const double sum_log_probs = static_cast<double>(sum) - static_cast<double>(v) * static_cast<double>(lz);
      token = -(confidence * target_log_prob + low * (sum_log_probs - target_log_prob)) - entropy;
    }
    token += z_loss * static_cast<double>(lz) * static_cast<double>(lz);
    // A non-finite logit anywhere in the row (the exp sum is then NaN or
    // the max infinite) poisons the row, as the unfused formula would.
    if (!std::isfinite(lz)) token = std::numeric_limits<double>::quiet_NaN();
    loss[r] = static_cast<A>(token);
  }
}

template <typename A>
TY_INLINE void CrossEntropyBackwardRows(const A* logits, const int64_t* targets, const A* log_z, const A* grad,
                                        int64_t begin, int64_t end, int64_t v, double z_loss, double confidence,
                                        double low, A* dlogits) {
  for (int64_t r = begin; r < end; ++r) {
    const A* l = logits + r * v;
    A* d = dlogits + r * v;
    const A g = grad[r];
    if (g == A(0)) {  // padding: no gradient, no exp
      std::memset(d, 0, sizeof(A) * v);
      continue;
    }
    const A lz = log_z[r];
    const A coef = static_cast<A>(static_cast<double>(g) * (1.0 + 2.0 * z_loss * static_cast<double>(lz)));
    const A floor = static_cast<A>(static_cast<double>(g) * low);
    for (int64_t i = 0; i < v; ++i) d[i] = Exp(l[i] - lz) * coef - floor;
    d[targets[r]] -= static_cast<A>(static_cast<double>(g) * (confidence - low));
  }
}

}  // namespace

namespace internal {

TY_CLONES void RmsNormForwardF(const float* x, const float* scale, float epsilon, int64_t begin, int64_t end, int64_t d,
                               float* y, float* rstd) {
  RmsNormForwardRows(x, scale, epsilon, begin, end, d, y, rstd);
}
TY_CLONES void RmsNormForwardBf(const c10::BFloat16* x, const float* scale, float epsilon, int64_t begin, int64_t end,
                                int64_t d, c10::BFloat16* y, float* rstd) {
  RmsNormForwardRows(x, scale, epsilon, begin, end, d, y, rstd);
}
void RmsNormForwardD(const double* x, const double* scale, double epsilon, int64_t begin, int64_t end, int64_t d,
                     double* y, double* rstd) {
  RmsNormForwardRows(x, scale, epsilon, begin, end, d, y, rstd);
}
TY_CLONES void RmsNormBackwardF(const float* x, const float* g, const float* scale, const float* rstd, int64_t begin,
                                int64_t end, int64_t d, float* dx, float* dscale_part) {
  RmsNormBackwardRows(x, g, scale, rstd, begin, end, d, dx, dscale_part);
}
TY_CLONES void RmsNormBackwardBf(const c10::BFloat16* x, const c10::BFloat16* g, const float* scale, const float* rstd,
                                 int64_t begin, int64_t end, int64_t d, c10::BFloat16* dx, float* dscale_part) {
  RmsNormBackwardRows(x, g, scale, rstd, begin, end, d, dx, dscale_part);
}
void RmsNormBackwardD(const double* x, const double* g, const double* scale, const double* rstd, int64_t begin,
                      int64_t end, int64_t d, double* dx, double* dscale_part) {
  RmsNormBackwardRows(x, g, scale, rstd, begin, end, d, dx, dscale_part);
}

TY_CLONES void GatedGeluForwardF(const float* a, const float* b, int64_t begin, int64_t end, float* y) {
  GatedGeluForwardRange(a, b, begin, end, y);
}
TY_CLONES void GatedGeluForwardBf(const c10::BFloat16* a, const c10::BFloat16* b, int64_t begin, int64_t end,
                                  c10::BFloat16* y) {
  GatedGeluForwardRange(a, b, begin, end, y);
}
void GatedGeluForwardD(const double* a, const double* b, int64_t begin, int64_t end, double* y) {
  GatedGeluForwardRange(a, b, begin, end, y);
}
TY_CLONES void GatedGeluBackwardF(const float* a, const float* b, const float* g, int64_t begin, int64_t end, float* da,
                                  float* db) {
  GatedGeluBackwardRange(a, b, g, begin, end, da, db);
}
TY_CLONES void GatedGeluBackwardBf(const c10::BFloat16* a, const c10::BFloat16* b, const c10::BFloat16* g,
                                   int64_t begin, int64_t end, c10::BFloat16* da, c10::BFloat16* db) {
  GatedGeluBackwardRange(a, b, g, begin, end, da, db);
}
void GatedGeluBackwardD(const double* a, const double* b, const double* g, int64_t begin, int64_t end, double* da,
                        double* db) {
  GatedGeluBackwardRange(a, b, g, begin, end, da, db);
}

TY_CLONES void CrossEntropyForwardF(const float* logits, const int64_t* targets, int64_t begin, int64_t end, int64_t v,
                                    double z_loss, double confidence, double low, double entropy, float* loss,
                                    float* log_z, int64_t* argmax) {
  CrossEntropyForwardRows(logits, targets, begin, end, v, z_loss, confidence, low, entropy, loss, log_z, argmax);
}
void CrossEntropyForwardD(const double* logits, const int64_t* targets, int64_t begin, int64_t end, int64_t v,
                          double z_loss, double confidence, double low, double entropy, double* loss, double* log_z,
                          int64_t* argmax) {
  CrossEntropyForwardRows(logits, targets, begin, end, v, z_loss, confidence, low, entropy, loss, log_z, argmax);
}
TY_CLONES void CrossEntropyBackwardF(const float* logits, const int64_t* targets, const float* log_z, const float* grad,
                                     int64_t begin, int64_t end, int64_t v, double z_loss, double confidence,
                                     double low, float* dlogits) {
  CrossEntropyBackwardRows(logits, targets, log_z, grad, begin, end, v, z_loss, confidence, low, dlogits);
}
void CrossEntropyBackwardD(const double* logits, const int64_t* targets, const double* log_z, const double* grad,
                           int64_t begin, int64_t end, int64_t v, double z_loss, double confidence, double low,
                           double* dlogits) {
  CrossEntropyBackwardRows(logits, targets, log_z, grad, begin, end, v, z_loss, confidence, low, dlogits);
}

float Exp(float x) { return fused::Exp(x); }

}  // namespace internal

}  // namespace fused
}  // namespace trainyard

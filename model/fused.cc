#include "model/fused.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace trainyard {
namespace fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

std::atomic<bool> g_enabled{true};

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
// Rows per partial sum of RmsNorm's scale gradient: the blocks, not the
// threads, fix the summation order.
constexpr int64_t kRowsPerBlock = 64;

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

TY_CLONES void RmsNormForwardF(const float* x, const float* s, float e, int64_t b, int64_t n, int64_t d, float* y,
                               float* rstd) {
  RmsNormForwardRows(x, s, e, b, n, d, y, rstd);
}
TY_CLONES void RmsNormForwardBf(const c10::BFloat16* x, const float* s, float e, int64_t b, int64_t n, int64_t d,
                                c10::BFloat16* y, float* rstd) {
  RmsNormForwardRows(x, s, e, b, n, d, y, rstd);
}
void RmsNormForwardD(const double* x, const double* s, double e, int64_t b, int64_t n, int64_t d, double* y,
                     double* rstd) {
  RmsNormForwardRows(x, s, e, b, n, d, y, rstd);
}
TY_CLONES void RmsNormBackwardF(const float* x, const float* g, const float* s, const float* rstd, int64_t b, int64_t n,
                                int64_t d, float* dx, float* part) {
  RmsNormBackwardRows(x, g, s, rstd, b, n, d, dx, part);
}
TY_CLONES void RmsNormBackwardBf(const c10::BFloat16* x, const c10::BFloat16* g, const float* s, const float* rstd,
                                 int64_t b, int64_t n, int64_t d, c10::BFloat16* dx, float* part) {
  RmsNormBackwardRows(x, g, s, rstd, b, n, d, dx, part);
}
void RmsNormBackwardD(const double* x, const double* g, const double* s, const double* rstd, int64_t b, int64_t n,
                      int64_t d, double* dx, double* part) {
  RmsNormBackwardRows(x, g, s, rstd, b, n, d, dx, part);
}

void RmsNormForward(const torch::Tensor& x, const torch::Tensor& scale, double epsilon, torch::Tensor* y,
                    torch::Tensor* rstd) {
  const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
  *y = torch::empty_like(x);
  const auto acc_type = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  *rstd = torch::empty({rows}, x.options().dtype(acc_type));
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    switch (x.scalar_type()) {
      case torch::kFloat:
        RmsNormForwardF(x.data_ptr<float>(), scale.data_ptr<float>(), static_cast<float>(epsilon), begin, end, d,
                        y->data_ptr<float>(), rstd->data_ptr<float>());
        break;
      case torch::kBFloat16:
        RmsNormForwardBf(x.data_ptr<c10::BFloat16>(), scale.data_ptr<float>(), static_cast<float>(epsilon), begin, end,
                         d, y->data_ptr<c10::BFloat16>(), rstd->data_ptr<float>());
        break;
      default:
        RmsNormForwardD(x.data_ptr<double>(), scale.data_ptr<double>(), epsilon, begin, end, d, y->data_ptr<double>(),
                        rstd->data_ptr<double>());
    }
  });
}

void RmsNormBackward(const torch::Tensor& x, const torch::Tensor& g, const torch::Tensor& scale,
                     const torch::Tensor& rstd, bool want_dx, bool want_dscale, torch::Tensor* dx,
                     torch::Tensor* dscale) {
  const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (want_dx) *dx = torch::empty_like(x);
  torch::Tensor parts;
  if (want_dscale) parts = torch::zeros({std::max<int64_t>(blocks, 1), d}, scale.options());
  at::parallel_for(0, blocks, 1, [&](int64_t block_begin, int64_t block_end) {
    for (int64_t block = block_begin; block < block_end; ++block) {
      const int64_t begin = block * kRowsPerBlock, end = std::min(rows, begin + kRowsPerBlock);
      switch (x.scalar_type()) {
        case torch::kFloat:
          RmsNormBackwardF(x.data_ptr<float>(), g.data_ptr<float>(), scale.data_ptr<float>(), rstd.data_ptr<float>(),
                           begin, end, d, want_dx ? dx->data_ptr<float>() : nullptr,
                           want_dscale ? parts.data_ptr<float>() + block * d : nullptr);
          break;
        case torch::kBFloat16:
          RmsNormBackwardBf(x.data_ptr<c10::BFloat16>(), g.data_ptr<c10::BFloat16>(), scale.data_ptr<float>(),
                            rstd.data_ptr<float>(), begin, end, d, want_dx ? dx->data_ptr<c10::BFloat16>() : nullptr,
                            want_dscale ? parts.data_ptr<float>() + block * d : nullptr);
          break;
        default:
          RmsNormBackwardD(x.data_ptr<double>(), g.data_ptr<double>(), scale.data_ptr<double>(),
                           rstd.data_ptr<double>(), begin, end, d, want_dx ? dx->data_ptr<double>() : nullptr,
                           want_dscale ? parts.data_ptr<double>() + block * d : nullptr);
      }
    }
  });
  if (want_dscale) {
    // Blocks summed in order, one after the other: a fixed order.
    *dscale = parts[0].clone();
    for (int64_t b = 1; b < blocks; ++b) dscale->add_(parts[b]);
  }
}

class RmsNormFunction : public Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& scale_in,
                               double epsilon) {
    const torch::Tensor x = x_in.contiguous();
    const torch::Tensor scale = scale_in.contiguous();
    torch::Tensor y, rstd;
    RmsNormForward(x, scale, epsilon, &y, &rstd);
    ctx->save_for_backward({x, scale, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    torch::Tensor dx, dscale;
    RmsNormBackward(saved[0], grads[0].contiguous(), saved[1], saved[2], ctx->needs_input_grad(0),
                    ctx->needs_input_grad(1), &dx, &dscale);
    return {dx, dscale, torch::Tensor()};
  }
};

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

TY_CLONES void GatedGeluForwardF(const float* a, const float* b, int64_t s, int64_t e, float* y) {
  GatedGeluForwardRange(a, b, s, e, y);
}
TY_CLONES void GatedGeluForwardBf(const c10::BFloat16* a, const c10::BFloat16* b, int64_t s, int64_t e,
                                  c10::BFloat16* y) {
  GatedGeluForwardRange(a, b, s, e, y);
}
void GatedGeluForwardD(const double* a, const double* b, int64_t s, int64_t e, double* y) {
  GatedGeluForwardRange(a, b, s, e, y);
}
TY_CLONES void GatedGeluBackwardF(const float* a, const float* b, const float* g, int64_t s, int64_t e, float* da,
                                  float* db) {
  GatedGeluBackwardRange(a, b, g, s, e, da, db);
}
TY_CLONES void GatedGeluBackwardBf(const c10::BFloat16* a, const c10::BFloat16* b, const c10::BFloat16* g, int64_t s,
                                   int64_t e, c10::BFloat16* da, c10::BFloat16* db) {
  GatedGeluBackwardRange(a, b, g, s, e, da, db);
}
void GatedGeluBackwardD(const double* a, const double* b, const double* g, int64_t s, int64_t e, double* da,
                        double* db) {
  GatedGeluBackwardRange(a, b, g, s, e, da, db);
}

constexpr int64_t kElementGrain = 32768;

class GatedGeluFunction : public Function<GatedGeluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a_in, const torch::Tensor& b_in) {
    const torch::Tensor a = a_in.contiguous(), b = b_in.contiguous();
    torch::Tensor y = torch::empty_like(a);
    at::parallel_for(0, a.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      switch (a.scalar_type()) {
        case torch::kFloat:
          GatedGeluForwardF(a.data_ptr<float>(), b.data_ptr<float>(), begin, end, y.data_ptr<float>());
          break;
        case torch::kBFloat16:
          GatedGeluForwardBf(a.data_ptr<c10::BFloat16>(), b.data_ptr<c10::BFloat16>(), begin, end,
                             y.data_ptr<c10::BFloat16>());
          break;
        default:
          GatedGeluForwardD(a.data_ptr<double>(), b.data_ptr<double>(), begin, end, y.data_ptr<double>());
      }
    });
    ctx->save_for_backward({a, b});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &b = saved[1];
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor da = torch::empty_like(a), db = torch::empty_like(b);
    at::parallel_for(0, a.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      switch (a.scalar_type()) {
        case torch::kFloat:
          GatedGeluBackwardF(a.data_ptr<float>(), b.data_ptr<float>(), g.data_ptr<float>(), begin, end,
                             da.data_ptr<float>(), db.data_ptr<float>());
          break;
        case torch::kBFloat16:
          GatedGeluBackwardBf(a.data_ptr<c10::BFloat16>(), b.data_ptr<c10::BFloat16>(), g.data_ptr<c10::BFloat16>(),
                              begin, end, da.data_ptr<c10::BFloat16>(), db.data_ptr<c10::BFloat16>());
          break;
        default:
          GatedGeluBackwardD(a.data_ptr<double>(), b.data_ptr<double>(), g.data_ptr<double>(), begin, end,
                             da.data_ptr<double>(), db.data_ptr<double>());
      }
    });
    return {ctx->needs_input_grad(0) ? da : torch::Tensor(), ctx->needs_input_grad(1) ? db : torch::Tensor()};
  }
};

// ---- Cross-entropy with z-loss ----

struct SmoothedTarget {
  double confidence = 1.0;  // weight on the target
  double low = 0.0;         // weight on every other class
  double entropy = 0.0;     // of that distribution
};

SmoothedTarget Smoothing(double label_smoothing, int64_t vocab) {
  SmoothedTarget s;
  if (label_smoothing > 0.0) {
    s.confidence = 1.0 - label_smoothing;
    s.low = label_smoothing / static_cast<double>(vocab - 1);
    s.entropy = -(s.confidence * std::log(s.confidence) + (vocab - 1) * s.low * std::log(s.low + 1e-20));
  }
  return s;
}

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

TY_CLONES void CrossEntropyForwardF(const float* l, const int64_t* t, int64_t b, int64_t e, int64_t v, double z,
                                    double c, double low, double ent, float* loss, float* lz, int64_t* am) {
  CrossEntropyForwardRows(l, t, b, e, v, z, c, low, ent, loss, lz, am);
}
void CrossEntropyForwardD(const double* l, const int64_t* t, int64_t b, int64_t e, int64_t v, double z, double c,
                          double low, double ent, double* loss, double* lz, int64_t* am) {
  CrossEntropyForwardRows(l, t, b, e, v, z, c, low, ent, loss, lz, am);
}
TY_CLONES void CrossEntropyBackwardF(const float* l, const int64_t* t, const float* lz, const float* g, int64_t b,
                                     int64_t e, int64_t v, double z, double c, double low, float* d) {
  CrossEntropyBackwardRows(l, t, lz, g, b, e, v, z, c, low, d);
}
void CrossEntropyBackwardD(const double* l, const int64_t* t, const double* lz, const double* g, int64_t b, int64_t e,
                           int64_t v, double z, double c, double low, double* d) {
  CrossEntropyBackwardRows(l, t, lz, g, b, e, v, z, c, low, d);
}

int64_t RowGrain(int64_t vocab) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(vocab, 1)); }

class CrossEntropyFunction : public Function<CrossEntropyFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits_in, const torch::Tensor& targets_in,
                               double z_loss, double label_smoothing) {
    const torch::Tensor logits = logits_in.contiguous();
    const torch::Tensor targets = targets_in.contiguous();
    const int64_t n = logits.size(0), v = logits.size(1);
    const SmoothedTarget smooth = Smoothing(label_smoothing, v);
    torch::Tensor loss = torch::empty({n}, logits.options());
    torch::Tensor log_z = torch::empty({n}, logits.options());
    torch::Tensor argmax = torch::empty({n}, logits.options().dtype(torch::kLong));
    at::parallel_for(0, n, RowGrain(v), [&](int64_t begin, int64_t end) {
      if (logits.scalar_type() == torch::kFloat) {
        CrossEntropyForwardF(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), begin, end, v, z_loss,
                             smooth.confidence, smooth.low, smooth.entropy, loss.data_ptr<float>(),
                             log_z.data_ptr<float>(), argmax.data_ptr<int64_t>());
      } else {
        CrossEntropyForwardD(logits.data_ptr<double>(), targets.data_ptr<int64_t>(), begin, end, v, z_loss,
                             smooth.confidence, smooth.low, smooth.entropy, loss.data_ptr<double>(),
                             log_z.data_ptr<double>(), argmax.data_ptr<int64_t>());
      }
    });
    ctx->save_for_backward({logits, targets, log_z});
    ctx->saved_data["z_loss"] = z_loss;
    ctx->saved_data["confidence"] = smooth.confidence;
    ctx->saved_data["low"] = smooth.low;
    ctx->mark_non_differentiable({log_z, argmax});
    return {loss, log_z, argmax};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &log_z = saved[2];
    const torch::Tensor g = grads[0].contiguous();
    const double z_loss = ctx->saved_data["z_loss"].toDouble();
    const double confidence = ctx->saved_data["confidence"].toDouble();
    const double low = ctx->saved_data["low"].toDouble();
    const int64_t n = logits.size(0), v = logits.size(1);
    torch::Tensor d = torch::empty_like(logits);
    at::parallel_for(0, n, RowGrain(v), [&](int64_t begin, int64_t end) {
      if (logits.scalar_type() == torch::kFloat) {
        CrossEntropyBackwardF(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), log_z.data_ptr<float>(),
                              g.data_ptr<float>(), begin, end, v, z_loss, confidence, low, d.data_ptr<float>());
      } else {
        CrossEntropyBackwardD(logits.data_ptr<double>(), targets.data_ptr<int64_t>(), log_z.data_ptr<double>(),
                              g.data_ptr<double>(), begin, end, v, z_loss, confidence, low, d.data_ptr<double>());
      }
    });
    return {d, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool FloatingType(const torch::Tensor& t, bool allow_bfloat16) {
  const auto type = t.scalar_type();
  return type == torch::kFloat || type == torch::kDouble || (allow_bfloat16 && type == torch::kBFloat16);
}

}  // namespace

void SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }
bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

namespace {
bool Dense(const torch::Tensor& t) { return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided; }
torch::ScalarType AccType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}
}  // namespace

bool RmsNormApplies(const torch::Tensor& x, const torch::Tensor& scale) {
  return Enabled() && Dense(x) && Dense(scale) && FloatingType(x, /*allow_bfloat16=*/true) &&
         scale.scalar_type() == AccType(x);
}

bool GatedGeluApplies(const torch::Tensor& a, const torch::Tensor& b) {
  return Enabled() && Dense(a) && Dense(b) && FloatingType(a, /*allow_bfloat16=*/true) &&
         a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes();
}

bool CrossEntropyApplies(const torch::Tensor& logits) {
  return Enabled() && Dense(logits) && FloatingType(logits, /*allow_bfloat16=*/false);
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& scale, double epsilon) {
  const auto acc_type = AccType(x);
  TORCH_CHECK(FloatingType(x, /*allow_bfloat16=*/true), "fused::RmsNorm: x is ", x.scalar_type(),
              "; float32, bfloat16 or float64 are allowed");
  TORCH_CHECK(scale.scalar_type() == acc_type, "fused::RmsNorm: scale is ", scale.scalar_type(), ", x ",
              x.scalar_type(), " needs ", acc_type);
  TORCH_CHECK(x.dim() >= 1 && scale.dim() == 1 && scale.size(0) == x.size(-1), "fused::RmsNorm: scale ", scale.sizes(),
              " does not match x ", x.sizes());
  return RmsNormFunction::apply(x, scale, epsilon);
}

torch::Tensor GatedGelu(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(FloatingType(a, /*allow_bfloat16=*/true) && a.scalar_type() == b.scalar_type(), "fused::GatedGelu: a is ",
              a.scalar_type(), ", b ", b.scalar_type(), "; both float32, bfloat16 or float64 are allowed");
  TORCH_CHECK(a.sizes() == b.sizes(), "fused::GatedGelu: shapes differ: ", a.sizes(), " and ", b.sizes());
  return GatedGeluFunction::apply(a, b);
}

CrossEntropyOutput CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss,
                                double label_smoothing) {
  TORCH_CHECK(FloatingType(logits, /*allow_bfloat16=*/false), "fused::CrossEntropy: logits are ", logits.scalar_type(),
              "; float32 or float64 are allowed");
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "fused::CrossEntropy: logits ", logits.sizes(), " and targets ", targets.sizes(),
              " must be [N, V] and [N]");
  TORCH_CHECK(targets.scalar_type() == torch::kLong, "fused::CrossEntropy: targets are ", targets.scalar_type(),
              ", int64 is allowed");
  TORCH_CHECK(logits.size(1) >= 2 || label_smoothing == 0.0, "fused::CrossEntropy: label smoothing needs V >= 2");
  if (targets.numel() > 0) {
    const int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < logits.size(1), "fused::CrossEntropy: target ", lo < 0 ? lo : hi, " is outside [0, ",
                logits.size(1), ")");
  }
  variable_list out = CrossEntropyFunction::apply(logits, targets, z_loss, label_smoothing);
  return CrossEntropyOutput{out[0], out[1], out[2]};
}

namespace internal {
float Exp(float x) { return fused::Exp(x); }
}  // namespace internal

}  // namespace fused
}  // namespace trainyard

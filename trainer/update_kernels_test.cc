#include "trainer/update_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace trainyard {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The plain scalar loops the kernels must reproduce bit for bit.
void ReferenceAdamW(const AdamWConstants& c, std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                    std::vector<float>& v) {
  for (size_t k = 0; k < p.size(); ++k) {
    const float mk = c.keep1 * m[k] + c.add1 * g[k];
    const float vk = c.keep2 * v[k] + c.add2 * (g[k] * g[k]);
    m[k] = mk;
    v[k] = vk;
    float u = (mk / c.correct1) / (std::sqrt(vk / c.correct2) + c.eps);
    if (c.decay > 0) u += c.decay * p[k];
    p[k] -= u * c.rate;
  }
}

// Uneven sizes (vector tails), with and without weight decay, several
// steps, the elements in one range and split at an odd point.
TEST(UpdateKernelsTest, AdamWIsTheScalarLoopBitForBit) {
  for (size_t n : {1u, 37u, 1000u, 100003u}) {
    for (float decay : {0.0f, 0.01f}) {
      std::vector<float> p = Random(n, 1, 1.0f), m(n, 0.0f), v(n, 0.0f);
      std::vector<float> p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
      for (int step = 1; step <= 4; ++step) {
        const std::vector<float> g = Random(n, 10 + step, 1e-3f);
        AdamWConstants c{0.9f,
                         0.1f,
                         0.999f,
                         0.001f,
                         static_cast<float>(1.0 - std::pow(0.9, step)),
                         static_cast<float>(1.0 - std::pow(0.999, step)),
                         1e-8f,
                         decay,
                         1e-3f};
        ReferenceAdamW(c, p, g, m, v);
        AdamWRange(c, p1.data(), g.data(), m1.data(), v1.data(), 0, static_cast<int64_t>(n));
        const int64_t cut = static_cast<int64_t>(n / 3);
        AdamWRange(c, p2.data(), g.data(), m2.data(), v2.data(), 0, cut);
        AdamWRange(c, p2.data(), g.data(), m2.data(), v2.data(), cut, static_cast<int64_t>(n));
      }
      EXPECT_TRUE(SameBits(p, p1) && SameBits(m, m1) && SameBits(v, v1)) << n << " decay " << decay;
      EXPECT_TRUE(SameBits(p, p2) && SameBits(m, m2) && SameBits(v, v2)) << n << " decay " << decay << ", split";
      EXPECT_FALSE(SameBits(p, Random(n, 1, 1.0f))) << "it moved";
    }
  }
}

TEST(UpdateKernelsTest, FactoredUpdateIsTheScalarLoopBitForBit) {
  for (int64_t cols : {1, 17, 512}) {
    const int64_t rows = 9;
    const size_t n = static_cast<size_t>(rows * cols);
    const std::vector<float> g = Random(n, 3, 1e-2f), r = Random(rows, 4, 1.0f), c = Random(cols, 5, 1.0f);
    for (float decay : {0.0f, 0.1f}) {
      std::vector<float> p = Random(n, 6, 1.0f), expected = p;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          float u = g[i * cols + j] * r[i] * c[j] * 0.25f;
          if (decay > 0) u += decay * expected[i * cols + j];
          expected[i * cols + j] -= u;
        }
      }
      FactoredUpdateRows(g.data(), r.data(), c.data(), 0.25f, decay, p.data(), cols, 0, 4);
      FactoredUpdateRows(g.data(), r.data(), c.data(), 0.25f, decay, p.data(), cols, 4, rows);
      EXPECT_TRUE(SameBits(p, expected)) << cols << " columns, decay " << decay;
    }
  }
}

// The statistics' sums against closed forms: g = 2 and p = 3 everywhere
// over a tail that does not fill the lanes.
TEST(FactoredMomentsTest, SumsMatchClosedForms) {
  const int64_t rows = 5, cols = 13;
  std::vector<float> g(rows * cols, 2.0f), p(rows * cols, 3.0f);
  std::vector<double> row_sums(rows, -1.0), col_sums(cols, 0.0);
  const float eps1 = 0.5f;
  const double p2 = FactoredMomentsRows(g.data(), p.data(), eps1, cols, 0, rows, row_sums.data(), col_sums.data());
  EXPECT_EQ(p2, 9.0 * rows * cols);
  for (double s : row_sums) EXPECT_EQ(s, 4.5 * cols);
  for (double s : col_sums) EXPECT_EQ(s, 4.5 * rows);
  std::vector<float> r(rows, 0.5f), c(cols, 0.25f);
  // u = 2 * 0.5 * 0.25 = 0.25 everywhere.
  EXPECT_EQ(FactoredUpdateSquaresRows(g.data(), r.data(), c.data(), cols, 0, rows), 0.0625 * rows * cols);
  EXPECT_EQ(FactoredUpdateSquaresRows(g.data(), r.data(), c.data(), cols, 2, 4), 0.0625 * 2 * cols);
}

// Random values against long double sums: the lanes change only the
// rounding of the double sums.
TEST(FactoredMomentsTest, SumsMatchLongDoubleSums) {
  const int64_t rows = 7, cols = 301;
  const std::vector<float> g = Random(rows * cols, 21, 1.0f), p = Random(rows * cols, 22, 0.1f);
  const std::vector<float> r = Random(rows, 23, 1.0f), c = Random(cols, 24, 1.0f);
  const float eps1 = 1e-30f;
  std::vector<double> row_sums(rows), col_sums(cols, 0.0);
  const double p2 = FactoredMomentsRows(g.data(), p.data(), eps1, cols, 0, rows, row_sums.data(), col_sums.data());
  const double u2 = FactoredUpdateSquaresRows(g.data(), r.data(), c.data(), cols, 0, rows);
  long double want_p2 = 0, want_u2 = 0;
  std::vector<long double> want_rows(rows, 0), want_cols(cols, 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float x = g[i * cols + j] * g[i * cols + j] + eps1;
      want_rows[i] += x;
      want_cols[j] += x;
      want_p2 += static_cast<long double>(p[i * cols + j]) * p[i * cols + j];
      const float u = g[i * cols + j] * r[i] * c[j];
      want_u2 += static_cast<long double>(u) * u;
    }
  }
  EXPECT_NEAR(p2, static_cast<double>(want_p2), 1e-13 * static_cast<double>(want_p2));
  EXPECT_NEAR(u2, static_cast<double>(want_u2), 1e-13 * static_cast<double>(want_u2));
  for (int64_t i = 0; i < rows; ++i) {
    EXPECT_NEAR(row_sums[i], static_cast<double>(want_rows[i]), 1e-13 * static_cast<double>(want_rows[i]));
  }
  for (int64_t j = 0; j < cols; ++j) {
    EXPECT_EQ(col_sums[j], static_cast<double>(want_cols[j]));  // 7 float terms: exact in double
  }
}

}  // namespace
}  // namespace trainyard

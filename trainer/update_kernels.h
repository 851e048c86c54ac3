// The element loops of the optimizers' one-pass updates (trainer/optimizer.cc)
// over float32 arrays, compiled for AVX-512, AVX2 and baseline x86-64 (the
// best for the CPU chosen when the library loads). The arithmetic is fixed:
// no contraction into FMA, no reassociation, IEEE division and square root
// in every clone, so every clone, and any split of the elements into
// ranges, gives the bits of the plain scalar loop.
#ifndef TRAINYARD_TRAINER_UPDATE_KERNELS_H_
#define TRAINYARD_TRAINER_UPDATE_KERNELS_H_

#include <cstdint>

namespace trainyard {

// AdamW with bias correction: for each k in [begin, end)
//   m = keep1 m + add1 g;  v = keep2 v + add2 g^2;
//   u = (m / correct1) / (sqrt(v / correct2) + eps) [+ decay p if decay > 0];
//   p -= u rate.
struct AdamWConstants {
  float keep1, add1, keep2, add2, correct1, correct2, eps, decay, rate;
};
void AdamWRange(const AdamWConstants& c, float* p, const float* g, float* m, float* v, int64_t begin, int64_t end);

// Adafactor's statistics of rows [begin, end) of a [rows, cols] gradient g
// and parameter p, in one pass. With x = g^2 + eps1 (float, as the tensor
// formula squares): row_sums[i] = the sum over j of x[i][j]; col_sums[j] +=
// x[i][j] for each row. Returns the sum of p^2 over the rows. Sums are
// double, in kSumLanes lanes (element j goes to lane j % kSumLanes, the
// lanes added pairwise at the end), so the result depends only on the range.
double FactoredMomentsRows(const float* g, const float* p, float eps1, int64_t cols, int64_t begin, int64_t end,
                           double* row_sums, double* col_sums);

// The sum of u^2 over rows [begin, end), u = g[i][j] r[i] c[j] (float, as
// FactoredUpdateRows computes it), in the lanes of FactoredMomentsRows.
double FactoredUpdateSquaresRows(const float* g, const float* r, const float* c, int64_t cols, int64_t begin,
                                 int64_t end);

inline constexpr int kSumLanes = 8;

// Adafactor's factored update of rows [begin, end) of a [rows, cols]
// parameter: u = g[i][j] r[i] c[j] k [+ decay p if decay > 0]; p -= u.
void FactoredUpdateRows(const float* g, const float* r, const float* c, float k, float decay, float* p, int64_t cols,
                        int64_t begin, int64_t end);

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_UPDATE_KERNELS_H_

// The loops of model/fused.h's kernels, over contiguous arrays: plain C++
// written for the compiler's vectoriser (fixed-width partial sums, a
// polynomial exp). Each call covers rows (GatedGelu: elements) [begin, end),
// so that callers split the work over threads; what a row computes, and the
// order its reductions run in, does not depend on the split.
//
// The suffix is the element type: F float32, Bf bfloat16 (computed in
// float32), D float64. The F and Bf loops are compiled for AVX-512, AVX2 and
// baseline x86-64, chosen at load time, with the same arithmetic in each.
//
// Private to //model:fused. Thread-safety: calls on disjoint ranges may run
// at once.
#ifndef TRAINYARD_MODEL_FUSED_KERNELS_H_
#define TRAINYARD_MODEL_FUSED_KERNELS_H_

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace trainyard {
namespace fused {
namespace internal {

// RMS norm of rows of x [rows, d]: y = x / sqrt(mean(x^2) + epsilon) * scale,
// and each row's 1 / sqrt(mean(x^2) + epsilon) in rstd [rows].
void RmsNormForwardF(const float* x, const float* scale, float epsilon, int64_t begin, int64_t end, int64_t d, float* y,
                     float* rstd);
void RmsNormForwardBf(const c10::BFloat16* x, const float* scale, float epsilon, int64_t begin, int64_t end, int64_t d,
                      c10::BFloat16* y, float* rstd);
void RmsNormForwardD(const double* x, const double* scale, double epsilon, int64_t begin, int64_t end, int64_t d,
                     double* y, double* rstd);

// Its backward from the gradient g of y: dx when not null, and the scale's
// gradient of these rows added to `dscale_part` [d] when not null.
void RmsNormBackwardF(const float* x, const float* g, const float* scale, const float* rstd, int64_t begin, int64_t end,
                      int64_t d, float* dx, float* dscale_part);
void RmsNormBackwardBf(const c10::BFloat16* x, const c10::BFloat16* g, const float* scale, const float* rstd,
                       int64_t begin, int64_t end, int64_t d, c10::BFloat16* dx, float* dscale_part);
void RmsNormBackwardD(const double* x, const double* g, const double* scale, const double* rstd, int64_t begin,
                      int64_t end, int64_t d, double* dx, double* dscale_part);

// y = gelu_tanh(a) * b, elementwise.
void GatedGeluForwardF(const float* a, const float* b, int64_t begin, int64_t end, float* y);
void GatedGeluForwardBf(const c10::BFloat16* a, const c10::BFloat16* b, int64_t begin, int64_t end, c10::BFloat16* y);
void GatedGeluForwardD(const double* a, const double* b, int64_t begin, int64_t end, double* y);

// Its backward from the gradient g of y: da and db.
void GatedGeluBackwardF(const float* a, const float* b, const float* g, int64_t begin, int64_t end, float* da,
                        float* db);
void GatedGeluBackwardBf(const c10::BFloat16* a, const c10::BFloat16* b, const c10::BFloat16* g, int64_t begin,
                         int64_t end, c10::BFloat16* da, c10::BFloat16* db);
void GatedGeluBackwardD(const double* a, const double* b, const double* g, int64_t begin, int64_t end, double* da,
                        double* db);

// Cross-entropy of rows of logits [rows, v] against targets [rows], with
// z-loss and a smoothed target (weight `confidence` on the target, `low`
// on every other class, `entropy` that distribution's): each row's loss,
// log Z and first index of the largest logit.
void CrossEntropyForwardF(const float* logits, const int64_t* targets, int64_t begin, int64_t end, int64_t v,
                          double z_loss, double confidence, double low, double entropy, float* loss, float* log_z,
                          int64_t* argmax);
void CrossEntropyForwardD(const double* logits, const int64_t* targets, int64_t begin, int64_t end, int64_t v,
                          double z_loss, double confidence, double low, double entropy, double* loss, double* log_z,
                          int64_t* argmax);

// Its backward from the losses' gradient `grad` [rows]: dlogits (zeros for
// a row whose gradient is 0).
void CrossEntropyBackwardF(const float* logits, const int64_t* targets, const float* log_z, const float* grad,
                           int64_t begin, int64_t end, int64_t v, double z_loss, double confidence, double low,
                           float* dlogits);
void CrossEntropyBackwardD(const double* logits, const int64_t* targets, const double* log_z, const double* grad,
                           int64_t begin, int64_t end, int64_t v, double z_loss, double confidence, double low,
                           double* dlogits);

}  // namespace internal
}  // namespace fused
}  // namespace trainyard

#endif  // TRAINYARD_MODEL_FUSED_KERNELS_H_

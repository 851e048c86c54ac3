// Fused CPU kernels for the memory-bound parts of T5's training step, as
// LibTorch autograd functions: each reads its inputs once per direction and
// writes one output, where the formula in ATen ops makes a pass (and often a
// temporary of the same size) per operation.
//
//   RmsNorm        y = x / sqrt(mean(x^2) + eps) * scale        (per row)
//   GatedGelu      y = gelu_tanh(a) * b                         (elementwise)
//   CrossEntropy   per-token cross-entropy with z-loss and label smoothing,
//                  without materialising log-softmax: the forward keeps
//                  log Z per row; the backward writes
//                  dL/dl_v = g (p_v (1 + 2 z log Z) - low) - g (conf - low) [v = t]
//                  in one pass over the logits.
//
// The loops are plain C++ written for the compiler's vectoriser (fixed-width
// partial sums, a polynomial exp), compiled for AVX-512, AVX2 and baseline
// x86-64 and chosen at load time. Reductions run in a fixed order that does
// not depend on the number of threads, so a step is reproducible bit for bit.
//
// They take CPU tensors of float32 (bfloat16 too for RmsNorm and GatedGelu,
// computed in float32) and float64 (tests). `...Applies` says whether a call
// can take the fused path; callers keep the ATen formula for everything else
// (CUDA tensors, other dtypes) and when `SetEnabled(false)` (benchmarks'
// A/B switch). Double backward is not supported.
//
// Thread-safety: the functions are thread-safe; the switch is atomic.
#ifndef TRAINYARD_MODEL_FUSED_H_
#define TRAINYARD_MODEL_FUSED_H_

#include <torch/types.h>

namespace trainyard {
namespace fused {

// Process-wide switch, on by default.
void SetEnabled(bool enabled);
bool Enabled();

// Whether a call can take the fused path: the switch is on, the tensors are
// on the CPU with dtypes the kernel takes (see each function).
bool RmsNormApplies(const torch::Tensor& x, const torch::Tensor& scale);
bool GatedGeluApplies(const torch::Tensor& a, const torch::Tensor& b);
bool CrossEntropyApplies(const torch::Tensor& logits);

// x [..., D] (float32, bfloat16 or float64), scale [D] float32 (float64 with
// float64 x). Returns x's dtype. Statistics in float32 (float64).
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& scale, double epsilon);

// a, b of one shape and dtype. gelu_tanh(u) = u/2 (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))).
torch::Tensor GatedGelu(const torch::Tensor& a, const torch::Tensor& b);

struct CrossEntropyOutput {
  // [N] per-token loss, differentiable with respect to the logits:
  //   -conf * log p(t) - low * sum_{v != t} log p(v) - entropy + z * log(Z)^2
  // with conf = 1 - ls, low = ls / (V - 1), entropy that of q (so a
  // perfect prediction of a smoothed target scores z * log(Z)^2).
  torch::Tensor token_loss;
  torch::Tensor log_z;   // [N] float, no gradient
  torch::Tensor argmax;  // [N] int64, the first index of the largest logit
};

// logits [N, V] float32/float64, targets [N] int64 in [0, V). A row with a
// non-finite logit has a NaN loss and log Z. A target outside [0, V) throws
// (c10::Error), as gather does.
CrossEntropyOutput CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss,
                                double label_smoothing);

namespace internal {
// The kernels' float32 e^x, exposed for tests.
float Exp(float x);
}  // namespace internal

}  // namespace fused
}  // namespace trainyard

#endif  // TRAINYARD_MODEL_FUSED_H_

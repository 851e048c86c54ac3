// Sums of float tensors whose result does not depend on the order or the
// grouping of their terms: a step's gradient as the sum of its global
// microbatches' gradients, the same bits however the microbatches are
// spread over the ranks (TrainerOptions::exact_reduction).
//
// Each term is turned into fixed-point integers against a scale shared by
// every term of the sum (one power of two per tensor), and integers add
// exactly, so any order and any grouping (a rank's own microbatches, then
// an integer all-reduce or reduce-scatter over the ranks) gives the same
// bits. A tensor's scale is 2^exponent: its terms' values must lie below it
// in magnitude; the fixed point keeps `fraction_bits` = 62 - ceil(log2(max
// terms)) bits below it, so a sum of up to `max_terms` terms cannot
// overflow an int64. The error of one term's value is at most 2^(exponent -
// fraction_bits - 1), far below float32's rounding near the largest values
// (2^-51 of the scale for 1024 terms).
//
// The exponents must be known before the first term. A caller takes them
// from the previous sum's largest values plus headroom (NextExponents): the
// largest exponent of every term is recorded (Observed) and, after the
// caller has combined the ranks' observations (a MAX all-reduce), a sum in
// which a value reached its tensor's scale is invalid (Overflowed) and is
// computed again with the exponents observed; both decisions depend on the
// terms only, never on how they were spread.
//
// Thread-compatible.
#ifndef TRAINYARD_TRAINER_EXACT_SUM_H_
#define TRAINYARD_TRAINER_EXACT_SUM_H_

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "absl/status/status.h"

namespace trainyard {

// The exponent of a tensor of zeros (and the least any exponent is taken to
// be: float32's smallest subnormal is 2^-149).
inline constexpr int kExactSumMinExponent = -140;
// The largest exponent a sum takes (float32's largest values lie below
// 2^128; the rest is headroom).
inline constexpr int kExactSumMaxExponent = 160;

// The least e with max |x| < 2^e over `t` (float32 or float64, finite);
// kExactSumMinExponent for zeros or below. A NaN or an infinity gives
// INT32_MAX (no scale holds it).
int MagnitudeExponent(const torch::Tensor& t);

class ExactSum {
 public:
  // `shapes`: one per tensor of a term. `max_terms` >= 1: the most terms
  // the sum will see (over every rank).
  ExactSum(const std::vector<std::vector<int64_t>>& shapes, int64_t max_terms);

  int fraction_bits() const { return fraction_bits_; }

  // Starts a sum (zeros) with tensor i's values below 2^exponents[i].
  // kInvalidArgument for a count other than the tensors', or an exponent
  // outside [kExactSumMinExponent, kExactSumMaxExponent].
  absl::Status Reset(const std::vector<int>& exponents);

  // Adds one term (float32 or float64 tensors of the shapes, on the CPU):
  // each value rounded to the nearest multiple of 2^(exponent -
  // fraction_bits). A value at or above its tensor's scale is recorded in
  // Observed and makes the sum invalid (its integer is then clamped, so
  // nothing overflows). kInvalidArgument for a term of other shapes.
  absl::Status Add(const std::vector<torch::Tensor>& term);

  // A sum whose integers its caller holds (sharded gradients: a bucket's,
  // reduce-scattered, then the shard of the sums; see GradientReducer):
  // starts it at the given scales (checked as Reset does) with nothing
  // observed, and holds no integers.
  absl::Status SetScales(const std::vector<int>& exponents);
  // Adds tensor i of a term (float32 or float64, `values.numel()` elements)
  // into `integers` (int64, contiguous, as many elements, on the values'
  // device) as Add does, recording its exponent in observed.
  // kInvalidArgument for another element count or dtype.
  absl::Status AddTensor(size_t i, const torch::Tensor& values, torch::Tensor integers);
  // Tensor i's integers (any shape) as float32: integers x 2^(exponent -
  // fraction_bits), through double.
  torch::Tensor TensorToFloat(size_t i, const torch::Tensor& integers) const;

  // The integers (int64, one per tensor): what the ranks all-reduce or
  // reduce-scatter with SUM.
  std::vector<torch::Tensor>& integers() { return integers_; }
  // Per tensor, the largest MagnitudeExponent of any term added: what the
  // ranks combine with MAX.
  std::vector<int>& observed() { return observed_; }
  // Whether a term's value reached its scale, judged on `observed` (after
  // the ranks combined it, every rank decides the same).
  bool Overflowed() const;

  // The sum as float32 tensors: integers x 2^(exponent - fraction_bits),
  // through double (the same integers always give the same bits).
  std::vector<torch::Tensor> ToFloat() const;

  // The exponents for the next sum: the observed ones plus `headroom`
  // (values may grow 2^headroom-fold before a sum is computed again), within
  // [kExactSumMinExponent, kExactSumMaxExponent].
  std::vector<int> NextExponents(int headroom) const;

 private:
  std::vector<std::vector<int64_t>> shapes_;
  int fraction_bits_ = 0;
  std::vector<int> exponents_;
  std::vector<torch::Tensor> integers_;
  std::vector<int> observed_;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_EXACT_SUM_H_

#include "trainer/exact_sum.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

int ExponentOf(double largest) {
  if (!std::isfinite(largest)) return INT_MAX;
  if (largest == 0) return kExactSumMinExponent;
  int exponent = 0;
  std::frexp(largest, &exponent);  // largest = m x 2^exponent, m in [0.5, 1)
  return std::max(exponent, kExactSumMinExponent);
}

// One float32 term into `acc` in one pass (Add's float32 case): the same
// integers as the tensor formula, rounding half to even; returns the
// term's largest magnitude (infinity when it holds a NaN or an infinity).
double AddFloats(const float* x, int64_t n, double scale, double bound, int64_t* acc) {
  float largest = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();
    largest = std::max(largest, a);
    double v = static_cast<double>(x[i]) * scale;
    v = std::isnan(v) ? 0.0 : std::clamp(v, -bound, bound);
    acc[i] += std::llrint(v);  // the current rounding mode: to nearest, ties to even
  }
  return finite ? largest : std::numeric_limits<double>::infinity();
}

}  // namespace

int MagnitudeExponent(const torch::Tensor& t) {
  if (t.numel() == 0) return kExactSumMinExponent;
  if (t.isnan().any().item<bool>()) return INT_MAX;
  return ExponentOf(t.abs().max().item<double>());
}

ExactSum::ExactSum(const std::vector<std::vector<int64_t>>& shapes, int64_t max_terms) : shapes_(shapes) {
  int bits = 0;  // ceil(log2(max_terms))
  while ((int64_t{1} << bits) < std::max<int64_t>(max_terms, 1)) ++bits;
  fraction_bits_ = 62 - bits;
}

absl::Status ExactSum::SetScales(const std::vector<int>& exponents) {
  if (exponents.size() != shapes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExactSum: ", exponents.size(), " exponents for ", shapes_.size(), " tensors"));
  }
  for (int e : exponents) {
    if (e < kExactSumMinExponent || e > kExactSumMaxExponent) {
      return absl::InvalidArgumentError(absl::StrCat("ExactSum: exponent ", e, " is outside [", kExactSumMinExponent,
                                                     ", ", kExactSumMaxExponent, "]"));
    }
  }
  exponents_ = exponents;
  integers_.clear();
  observed_.assign(shapes_.size(), kExactSumMinExponent);
  return absl::OkStatus();
}

absl::Status ExactSum::Reset(const std::vector<int>& exponents) {
  TY_RETURN_IF_ERROR(SetScales(exponents));
  for (const auto& shape : shapes_) integers_.push_back(torch::zeros(shape, torch::kLong));
  return absl::OkStatus();
}

absl::Status ExactSum::AddTensor(size_t i, const torch::Tensor& values, torch::Tensor integers) {
  if (i >= exponents_.size()) return absl::FailedPreconditionError("ExactSum: a tensor added before its scale is set");
  if (values.numel() != integers.numel() || integers.scalar_type() != torch::kLong || !integers.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("ExactSum: tensor ", i, ": ", values.numel(),
                                                   " values into a sum of ", integers.numel(), " integers"));
  }
  if (values.scalar_type() != torch::kFloat && values.scalar_type() != torch::kDouble) {
    return absl::InvalidArgumentError(absl::StrCat("ExactSum: tensor ", i, " is not float32 or float64"));
  }
  // x x 2^(fraction_bits - exponent) is exact in double (a float32's 24
  // bits, scaled by a power of two); rounding it is the only error.
  const double scale = std::ldexp(1.0, fraction_bits_ - exponents_[i]);
  const double bound = std::ldexp(1.0, fraction_bits_);
  if (values.scalar_type() == torch::kFloat && values.device().is_cpu() && integers.device().is_cpu()) {
    const torch::Tensor x = values.contiguous();
    const double largest = AddFloats(x.data_ptr<float>(), x.numel(), scale, bound, integers.data_ptr<int64_t>());
    observed_[i] = std::max(observed_[i], ExponentOf(largest));
    return absl::OkStatus();
  }
  observed_[i] = std::max(observed_[i], MagnitudeExponent(values));
  const torch::Tensor fixed =
      (values.to(torch::kDouble) * scale).round().nan_to_num(0.0, bound, -bound).clamp(-bound, bound);
  integers.add_(fixed.to(integers.device(), torch::kLong).view(integers.sizes()));
  return absl::OkStatus();
}

absl::Status ExactSum::Add(const std::vector<torch::Tensor>& term) {
  if (integers_.size() != shapes_.size()) return absl::FailedPreconditionError("ExactSum: Add before Reset");
  if (term.size() != shapes_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExactSum: a term of ", term.size(), " tensors; want ", shapes_.size()));
  }
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i].sizes().vec() != shapes_[i]) {
      return absl::InvalidArgumentError(absl::StrCat("ExactSum: term tensor ", i, " has shape [",
                                                     absl::StrJoin(term[i].sizes().vec(), ", "), "]; want [",
                                                     absl::StrJoin(shapes_[i], ", "), "]"));
    }
  }
  for (size_t i = 0; i < term.size(); ++i) {
    if (!integers_[i].is_contiguous()) integers_[i] = integers_[i].contiguous();
    TY_RETURN_IF_ERROR(AddTensor(i, term[i], integers_[i]));
  }
  return absl::OkStatus();
}

bool ExactSum::Overflowed() const {
  for (size_t i = 0; i < observed_.size(); ++i) {
    if (observed_[i] > exponents_[i]) return true;
  }
  return false;
}

torch::Tensor ExactSum::TensorToFloat(size_t i, const torch::Tensor& integers) const {
  const double unit = std::ldexp(1.0, exponents_[i] - fraction_bits_);
  return (integers.to(torch::kDouble) * unit).to(torch::kFloat);
}

std::vector<torch::Tensor> ExactSum::ToFloat() const {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < integers_.size(); ++i) out.push_back(TensorToFloat(i, integers_[i]));
  return out;
}

std::vector<int> ExactSum::NextExponents(int headroom) const {
  std::vector<int> next;
  for (int e : observed_) {
    const int64_t wanted = static_cast<int64_t>(e) + headroom;
    next.push_back(static_cast<int>(std::clamp<int64_t>(wanted, kExactSumMinExponent, kExactSumMaxExponent)));
  }
  return next;
}

}  // namespace trainyard

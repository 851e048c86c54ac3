#include "trainer/exact_sum.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

const std::vector<std::vector<int64_t>> kShapes = {{5, 7}, {3}};

// 24 terms (one per microbatch): values spread over eight binary orders of
// magnitude, of both signs, so float32 sums round differently by order.
std::vector<std::vector<torch::Tensor>> Terms(int n) {
  torch::manual_seed(3);
  std::vector<std::vector<torch::Tensor>> terms;
  for (int j = 0; j < n; ++j) {
    std::vector<torch::Tensor> term;
    for (const auto& shape : kShapes) {
      term.push_back(torch::randn(shape) * torch::pow(2.0, torch::randint(-6, 2, shape).to(torch::kFloat)));
    }
    terms.push_back(term);
  }
  return terms;
}

// The terms spread over `world` ranks in contiguous runs (uneven when world
// does not divide them), each rank's run summed on its own, the ranks'
// integers then added (an all-reduce), with the given exponents.
std::vector<torch::Tensor> SumOver(const std::vector<std::vector<torch::Tensor>>& terms, int world,
                                   const std::vector<int>& exponents, bool reverse = false) {
  std::vector<ExactSum> ranks(world, ExactSum(kShapes, static_cast<int64_t>(terms.size())));
  const int n = static_cast<int>(terms.size());
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(ranks[r].Reset(exponents), IsOk());
    std::vector<int> mine(r * n / world == (r + 1) * n / world ? 0 : (r + 1) * n / world - r * n / world);
    std::iota(mine.begin(), mine.end(), r * n / world);
    if (reverse) std::reverse(mine.begin(), mine.end());
    for (int j : mine) EXPECT_THAT(ranks[r].Add(terms[j]), IsOk());
  }
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < kShapes.size(); ++i) ranks[0].integers()[i] += ranks[r].integers()[i];
  }
  EXPECT_FALSE(ranks[0].Overflowed());
  return ranks[0].ToFloat();
}

TEST(ExactSumTest, TheSumIsTheSameBitsWhateverTheOrderAndGrouping) {
  const auto terms = Terms(24);
  const std::vector<int> exponents = {4, 4};  // every value lies below 2^4 (checked: no overflow)
  const std::vector<torch::Tensor> one = SumOver(terms, 1, exponents);
  for (int world : {2, 3, 4, 5, 24}) {
    for (bool reverse : {false, true}) {
      const std::vector<torch::Tensor> other = SumOver(terms, world, exponents, reverse);
      for (size_t i = 0; i < kShapes.size(); ++i) {
        EXPECT_TRUE(torch::equal(other[i], one[i])) << "world " << world << (reverse ? ", reversed" : "");
      }
    }
  }
  // Float32 sums of the same terms in the same groupings do differ (what the
  // fixed point is for).
  auto float_sum = [&](int world) {
    torch::Tensor total = torch::zeros(kShapes[0]);
    for (int r = 0; r < world; ++r) {
      torch::Tensor part = torch::zeros(kShapes[0]);
      for (int j = r * 24 / world; j < (r + 1) * 24 / world; ++j) part += terms[j][0];
      total += part;
    }
    return total;
  };
  EXPECT_FALSE(torch::equal(float_sum(1), float_sum(3)) && torch::equal(float_sum(1), float_sum(4)));
}

TEST(ExactSumTest, TheSumIsWithinHalfAFloatUlpOfTheExactOne) {
  const auto terms = Terms(24);
  ExactSum sum(kShapes, 24);
  EXPECT_EQ(sum.fraction_bits(), 62 - 5);  // 24 terms: 5 bits of headroom
  ASSERT_THAT(sum.Reset({4, 4}), IsOk());
  for (const auto& term : terms) ASSERT_THAT(sum.Add(term), IsOk());
  const std::vector<torch::Tensor> got = sum.ToFloat();
  for (size_t i = 0; i < kShapes.size(); ++i) {
    torch::Tensor exact = torch::zeros(kShapes[i], torch::kDouble);
    for (const auto& term : terms) exact += term[i].to(torch::kDouble);
    // Each term's rounding: at most 2^(4 - 57 - 1); 24 of them, then the
    // float32 rounding of the result (half an ulp of the float nearest).
    const torch::Tensor nearest = exact.to(torch::kFloat);
    const torch::Tensor half_ulp =
        (torch::nextafter(nearest.abs(), torch::full_like(nearest, std::numeric_limits<float>::infinity())) -
         nearest.abs())
            .to(torch::kDouble) /
        2;
    const torch::Tensor error = (got[i].to(torch::kDouble) - exact).abs();
    EXPECT_TRUE(error.le(half_ulp + 24 * std::ldexp(1.0, 4 - 57 - 1)).all().item<bool>())
        << "tensor " << i << ": largest error " << error.max().item<double>();
  }
}

TEST(ExactSumTest, AValueAtItsScaleOverflowsAndTheObservedExponentsHoldIt) {
  const auto terms = Terms(24);
  ExactSum sum(kShapes, 24);
  ASSERT_THAT(sum.Reset({0, 4}), IsOk());  // tensor 0 holds values of 1 and more
  for (const auto& term : terms) ASSERT_THAT(sum.Add(term), IsOk());
  EXPECT_TRUE(sum.Overflowed());
  const std::vector<int> observed = sum.observed();
  EXPECT_GT(observed[0], 0);
  EXPECT_LE(observed[1], 4);
  // Computed again with what was observed (plus headroom): valid (SumOver
  // checks), and the same bits on any grouping.
  const std::vector<int> next = sum.NextExponents(1);
  EXPECT_EQ(next, (std::vector<int>{observed[0] + 1, observed[1] + 1}));
  EXPECT_TRUE(torch::equal(SumOver(terms, 1, next)[0], SumOver(terms, 3, next)[0]));
}

// Float32 terms take a one-pass loop, others the tensor formula: the same
// integers (ties rounded to even in both) and the same observations.
TEST(ExactSumTest, FloatAndDoubleTermsGiveTheSameIntegers) {
  const auto terms = Terms(6);
  ExactSum floats(kShapes, 8), doubles(kShapes, 8);
  ASSERT_THAT(floats.Reset({4, -1}), IsOk());  // tensor 1 overflows: clamped alike
  ASSERT_THAT(doubles.Reset({4, -1}), IsOk());
  for (const auto& term : terms) {
    ASSERT_THAT(floats.Add(term), IsOk());
    ASSERT_THAT(doubles.Add({term[0].to(torch::kDouble), term[1].to(torch::kDouble)}), IsOk());
  }
  // A tie: 0.5 and 1.5 units round to 0 and 2.
  const double unit = std::ldexp(1.0, 4 - floats.fraction_bits());
  const torch::Tensor ties = torch::zeros({5, 7});
  ties[0][0] = static_cast<float>(0.5 * unit);
  ties[0][1] = static_cast<float>(1.5 * unit);
  ASSERT_THAT(floats.Add({ties, torch::zeros({3})}), IsOk());
  ASSERT_THAT(doubles.Add({ties.to(torch::kDouble), torch::zeros({3}, torch::kDouble)}), IsOk());
  for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(torch::equal(floats.integers()[i], doubles.integers()[i]));
  EXPECT_EQ(floats.observed(), doubles.observed());
  EXPECT_TRUE(floats.Overflowed());
}

TEST(ExactSumTest, MagnitudeExponentIsTheLeastPowerOfTwoAbove) {
  EXPECT_EQ(MagnitudeExponent(torch::zeros({4})), kExactSumMinExponent);
  EXPECT_EQ(MagnitudeExponent(torch::tensor({0.75f, -0.5f})), 0);  // below 2^0
  EXPECT_EQ(MagnitudeExponent(torch::tensor({1.0f})), 1);          // 1 is not below 2^0
  EXPECT_EQ(MagnitudeExponent(torch::tensor({-3.0f, 2.0f})), 2);
  EXPECT_EQ(MagnitudeExponent(torch::tensor({std::ldexp(1.0f, -149)})), kExactSumMinExponent);
  EXPECT_EQ(MagnitudeExponent(torch::tensor({1.0f, std::numeric_limits<float>::quiet_NaN()})), INT_MAX);
  EXPECT_EQ(MagnitudeExponent(torch::tensor({std::numeric_limits<float>::infinity()})), INT_MAX);
}

TEST(ExactSumTest, ANonFiniteTermOverflowsWithoutPoisoningTheIntegers) {
  ExactSum sum({{2}}, 4);
  ASSERT_THAT(sum.Reset({2}), IsOk());
  ASSERT_THAT(sum.Add({torch::tensor({1.0f, std::numeric_limits<float>::quiet_NaN()})}), IsOk());
  EXPECT_TRUE(sum.Overflowed());
  EXPECT_EQ(sum.NextExponents(2), std::vector<int>{kExactSumMaxExponent});
  EXPECT_EQ(sum.integers()[0][1].item<int64_t>(), 0);  // the NaN's integer
}

TEST(ExactSumTest, BadCallsAreInvalidArgument) {
  ExactSum sum(kShapes, 8);
  EXPECT_THAT(sum.Add({torch::zeros({5, 7}), torch::zeros({3})}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Add before Reset")));
  EXPECT_THAT(sum.Reset({1}), StatusIs(absl::StatusCode::kInvalidArgument, "ExactSum: 1 exponents for 2 tensors"));
  EXPECT_THAT(sum.Reset({1, 500}),
              StatusIs(absl::StatusCode::kInvalidArgument, "ExactSum: exponent 500 is outside [-140, 160]"));
  ASSERT_THAT(sum.Reset({1, 1}), IsOk());
  EXPECT_THAT(sum.Add({torch::zeros({7, 5}), torch::zeros({3})}),
              StatusIs(absl::StatusCode::kInvalidArgument, "ExactSum: term tensor 0 has shape [7, 5]; want [5, 7]"));
  EXPECT_THAT(sum.Add({torch::zeros({5, 7})}),
              StatusIs(absl::StatusCode::kInvalidArgument, "ExactSum: a term of 1 tensors; want 2"));
}

// A sum whose integers its caller holds (the gradient reducer's buckets):
// AddTensor into flat integers gives Add's integers and observed exponents,
// and TensorToFloat ToFloat's values.
TEST(ExactSumTest, IntegersTheCallerHoldsAreAddsIntegers) {
  const std::vector<std::vector<torch::Tensor>> terms = Terms(5);
  const std::vector<int> exponents = {3, 3};
  ExactSum whole(kShapes, 8), held(kShapes, 8);
  ASSERT_THAT(whole.Reset(exponents), IsOk());
  ASSERT_THAT(held.SetScales(exponents), IsOk());
  EXPECT_TRUE(held.integers().empty());
  std::vector<torch::Tensor> flat = {torch::zeros({35}, torch::kLong), torch::zeros({3}, torch::kLong)};
  for (const auto& term : terms) {
    ASSERT_THAT(whole.Add(term), IsOk());
    for (size_t i = 0; i < term.size(); ++i) ASSERT_THAT(held.AddTensor(i, term[i], flat[i]), IsOk());
  }
  EXPECT_EQ(held.observed(), whole.observed());
  for (size_t i = 0; i < flat.size(); ++i) {
    EXPECT_TRUE(torch::equal(flat[i], whole.integers()[i].reshape({-1}))) << i;
    EXPECT_TRUE(torch::equal(held.TensorToFloat(i, flat[i]), whole.ToFloat()[i].reshape({-1}))) << i;
  }
  EXPECT_THAT(held.AddTensor(0, torch::zeros({34}), flat[0]),
              StatusIs(absl::StatusCode::kInvalidArgument, "ExactSum: tensor 0: 34 values into a sum of 35 integers"));
  EXPECT_THAT(held.AddTensor(1, torch::zeros({3}, torch::kLong), flat[1]),
              StatusIs(absl::StatusCode::kInvalidArgument, "ExactSum: tensor 1 is not float32 or float64"));
}

}  // namespace
}  // namespace trainyard

#include "model/fused.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <iostream>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// The unfused formulas, in ATen ops: what the fused functions replace.
torch::Tensor RmsNormReference(const torch::Tensor& x, const torch::Tensor& scale, double eps) {
  torch::Tensor x32 = x.to(scale.scalar_type());
  torch::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return (x32 * torch::rsqrt(variance + eps) * scale).to(x.scalar_type());
}

torch::Tensor GatedGeluReference(const torch::Tensor& a, const torch::Tensor& b) { return torch::gelu(a, "tanh") * b; }

// The per-token loss of model/loss.cc's unfused path.
torch::Tensor CrossEntropyReference(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss, double ls,
                                    torch::Tensor* log_z_out = nullptr) {
  const int64_t vocab = logits.size(-1);
  const torch::Tensor log_z = torch::logsumexp(logits, -1);
  const torch::Tensor log_softmax = logits - log_z.unsqueeze(-1);
  const torch::Tensor tlp = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  torch::Tensor loss = -tlp;
  if (ls > 0) {
    const double conf = 1.0 - ls, low = ls / (vocab - 1);
    const double entropy = -(conf * std::log(conf) + (vocab - 1) * low * std::log(low + 1e-20));
    loss = -(conf * tlp + low * (log_softmax.sum(-1) - tlp)) - entropy;
  }
  if (log_z_out != nullptr) *log_z_out = log_z.detach();
  return loss + z_loss * log_z.pow(2);
}

double MaxRelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  return ((g - w).abs() / (w.abs() + 1.0)).max().item<double>();
}

// A float32 result against the float64 formula on the same inputs: the fused
// error is within a small factor of the unfused float32 formula's own.
void ExpectNoWorseThanUnfused(const torch::Tensor& fused, const torch::Tensor& unfused, const torch::Tensor& truth,
                              const char* what) {
  const double e_fused = MaxRelativeError(fused, truth), e_unfused = MaxRelativeError(unfused, truth);
  std::cout << what << ": fused " << e_fused << ", unfused " << e_unfused << "\n";
  EXPECT_LE(e_fused, 2 * e_unfused + 1e-7) << what << ": fused " << e_fused << ", unfused " << e_unfused;
}

torch::Tensor Leaf(torch::Tensor t) { return t.detach().requires_grad_(true); }

// Inputs and the upstream gradient, in `dtype`, from a fixed seed.
struct Case {
  torch::Tensor x, scale, grad;
};
Case RmsNormCase(std::vector<int64_t> shape, torch::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  Case c;
  const auto acc = dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
  c.x = (torch::randn(shape, torch::kDouble) * 3.0).to(dtype);
  c.scale = (torch::rand({shape.back()}, torch::kDouble) + 0.5).to(acc);
  c.grad = torch::randn(shape, torch::kDouble).to(dtype);
  return c;
}

struct RmsNormResult {
  torch::Tensor y, dx, dscale;
};
template <typename F>
RmsNormResult RunRmsNorm(const Case& c, F f) {
  torch::Tensor x = Leaf(c.x), scale = Leaf(c.scale);
  torch::Tensor y = f(x, scale);
  y.backward(c.grad);
  return {y.detach(), x.grad(), scale.grad()};
}

// Rows of 37 (not a multiple of the kernels' 16 lanes) and 512 (T5's
// d_model), 15 rows (one block) and 200 (several blocks of the scale's
// gradient, the last one partial).
TEST(FusedRmsNormTest, MatchesTheFormulaForwardAndBackwardInFloat64) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 5, 37}, std::vector<int64_t>{2, 100, 512}}) {
    const Case c = RmsNormCase(shape, torch::kDouble, 1);
    const RmsNormResult got = RunRmsNorm(c, [](auto x, auto s) { return fused::RmsNorm(x, s, 1e-6); });
    const RmsNormResult want = RunRmsNorm(c, [](auto x, auto s) { return RmsNormReference(x, s, 1e-6); });
    EXPECT_LT(MaxRelativeError(got.y, want.y), 1e-14);
    EXPECT_LT(MaxRelativeError(got.dx, want.dx), 1e-13);
    EXPECT_LT(MaxRelativeError(got.dscale, want.dscale), 1e-13);
    EXPECT_EQ(got.y.scalar_type(), torch::kDouble);
  }
}

TEST(FusedRmsNormTest, MatchesTheFormulaInFloat32) {
  const Case c = RmsNormCase({4, 60, 512}, torch::kFloat, 2);
  const Case c64{c.x.to(torch::kDouble), c.scale.to(torch::kDouble), c.grad.to(torch::kDouble)};
  const RmsNormResult got = RunRmsNorm(c, [](auto x, auto s) { return fused::RmsNorm(x, s, 1e-6); });
  const RmsNormResult unfused = RunRmsNorm(c, [](auto x, auto s) { return RmsNormReference(x, s, 1e-6); });
  const RmsNormResult truth = RunRmsNorm(c64, [](auto x, auto s) { return RmsNormReference(x, s, 1e-6); });
  ExpectNoWorseThanUnfused(got.y, unfused.y, truth.y, "y");
  ExpectNoWorseThanUnfused(got.dx, unfused.dx, truth.dx, "dx");
  ExpectNoWorseThanUnfused(got.dscale, unfused.dscale, truth.dscale, "dscale");
}

TEST(FusedRmsNormTest, BFloat16InAndOutStatisticsInFloat32) {
  const Case c = RmsNormCase({3, 7, 64}, torch::kBFloat16, 3);
  const RmsNormResult got = RunRmsNorm(c, [](auto x, auto s) { return fused::RmsNorm(x, s, 1e-6); });
  const RmsNormResult want = RunRmsNorm(c, [](auto x, auto s) { return RmsNormReference(x, s, 1e-6); });
  EXPECT_EQ(got.y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dx.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got.dscale.scalar_type(), torch::kFloat);
  // Within bfloat16's rounding (8 bits of mantissa).
  EXPECT_LT(MaxRelativeError(got.y, want.y), 1e-2);
  EXPECT_LT(MaxRelativeError(got.dx, want.dx), 2e-2);
  EXPECT_LT(MaxRelativeError(got.dscale, want.dscale), 2e-2);
}

TEST(FusedRmsNormTest, TheSameBitsWithOneAndTwoThreads) {
  const Case c = RmsNormCase({2, 300, 96}, torch::kFloat, 4);
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const RmsNormResult one = RunRmsNorm(c, [](auto x, auto s) { return fused::RmsNorm(x, s, 1e-6); });
  at::set_num_threads(2);
  const RmsNormResult two = RunRmsNorm(c, [](auto x, auto s) { return fused::RmsNorm(x, s, 1e-6); });
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
  EXPECT_TRUE(torch::equal(one.dscale, two.dscale));
}

TEST(FusedRmsNormTest, RefusesMismatchedScale) {
  try {
    fused::RmsNorm(torch::ones({2, 8}), torch::ones({7}), 1e-6);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not match x"));
  }
  try {
    fused::RmsNorm(torch::ones({2, 8}), torch::ones({8}, torch::kDouble), 1e-6);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs Float"));
  }
}

struct GeluResult {
  torch::Tensor y, da, db;
};
template <typename F>
GeluResult RunGelu(const torch::Tensor& a0, const torch::Tensor& b0, const torch::Tensor& g, F f) {
  torch::Tensor a = Leaf(a0), b = Leaf(b0);
  torch::Tensor y = f(a, b);
  y.backward(g);
  return {y.detach(), a.grad(), b.grad()};
}

// Inputs across GELU's whole shape: the linear region, the bend, and the
// saturated tails where tanh is +-1 (|u| up to 20).
torch::Tensor GeluInputs(std::vector<int64_t> shape, torch::ScalarType dtype) {
  return (torch::randn(shape, torch::kDouble) * 6.0).to(dtype);
}

TEST(FusedGatedGeluTest, MatchesTheFormulaForwardAndBackward) {
  torch::manual_seed(5);
  const torch::Tensor a = GeluInputs({3, 11, 133}, torch::kDouble), b = GeluInputs({3, 11, 133}, torch::kDouble);
  const torch::Tensor g = torch::randn({3, 11, 133}, torch::kDouble);
  const GeluResult truth = RunGelu(a, b, g, GatedGeluReference);
  const GeluResult got64 = RunGelu(a, b, g, fused::GatedGelu);
  EXPECT_LT(MaxRelativeError(got64.y, truth.y), 1e-13);
  EXPECT_LT(MaxRelativeError(got64.da, truth.da), 1e-13);
  EXPECT_LT(MaxRelativeError(got64.db, truth.db), 1e-13);

  const torch::Tensor a32 = a.to(torch::kFloat), b32 = b.to(torch::kFloat), g32 = g.to(torch::kFloat);
  const GeluResult truth32 =
      RunGelu(a32.to(torch::kDouble), b32.to(torch::kDouble), g32.to(torch::kDouble), GatedGeluReference);
  const GeluResult got = RunGelu(a32, b32, g32, fused::GatedGelu);
  const GeluResult unfused = RunGelu(a32, b32, g32, GatedGeluReference);
  ExpectNoWorseThanUnfused(got.y, unfused.y, truth32.y, "y");
  ExpectNoWorseThanUnfused(got.da, unfused.da, truth32.da, "da");
  ExpectNoWorseThanUnfused(got.db, unfused.db, truth32.db, "db");
}

TEST(FusedGatedGeluTest, BFloat16) {
  torch::manual_seed(6);
  const torch::Tensor a = GeluInputs({4, 256}, torch::kBFloat16), b = GeluInputs({4, 256}, torch::kBFloat16);
  const torch::Tensor g = torch::randn({4, 256}).to(torch::kBFloat16);
  const GeluResult got = RunGelu(a, b, g, fused::GatedGelu);
  // Against the float32 formula on the same bfloat16 values.
  const GeluResult want = RunGelu(a.to(torch::kFloat), b.to(torch::kFloat), g.to(torch::kFloat), GatedGeluReference);
  EXPECT_EQ(got.y.scalar_type(), torch::kBFloat16);
  EXPECT_LT(MaxRelativeError(got.y, want.y), 1e-2);
  EXPECT_LT(MaxRelativeError(got.da, want.da), 1e-2);
  EXPECT_LT(MaxRelativeError(got.db, want.db), 1e-2);
}

TEST(FusedGatedGeluTest, RefusesMismatchedInputs) {
  EXPECT_THROW(fused::GatedGelu(torch::ones({2, 3}), torch::ones({3, 2})), c10::Error);
  EXPECT_THROW(fused::GatedGelu(torch::ones({2}), torch::ones({2}, torch::kDouble)), c10::Error);
  EXPECT_FALSE(fused::GatedGeluApplies(torch::ones({2}), torch::ones({2}, torch::kDouble)));
  EXPECT_TRUE(fused::GatedGeluApplies(torch::ones({2}), torch::ones({2})));
}

TEST(FusedExpTest, WithinThreeUlpOverTheWholeRange) {
  double worst = 0;
  for (float x = -87.0f; x < 88.3f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(fused::internal::Exp(x) - want) / want);
  }
  EXPECT_LT(worst, 3 * 5.97e-8);  // float32's ulp at 1 is 1.19e-7; half of it per rounding
  EXPECT_EQ(fused::internal::Exp(0.0f), 1.0f);
  EXPECT_EQ(fused::internal::Exp(-100.0f), 0.0f);
  EXPECT_EQ(fused::internal::Exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(fused::internal::Exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isfinite(fused::internal::Exp(1000.0f)));  // saturates at e^88.3
}

struct CeResult {
  torch::Tensor loss, log_z, dlogits;
};

CeResult RunFusedCe(const torch::Tensor& logits0, const torch::Tensor& targets, const torch::Tensor& g, double z,
                    double ls) {
  torch::Tensor logits = Leaf(logits0);
  fused::CrossEntropyOutput out = fused::CrossEntropy(logits, targets, z, ls);
  out.token_loss.backward(g);
  EXPECT_FALSE(out.log_z.requires_grad());
  EXPECT_TRUE(torch::equal(out.argmax, logits0.argmax(-1)));
  return {out.token_loss.detach(), out.log_z, logits.grad()};
}

CeResult RunReferenceCe(const torch::Tensor& logits0, const torch::Tensor& targets, const torch::Tensor& g, double z,
                        double ls) {
  torch::Tensor logits = Leaf(logits0);
  CeResult r;
  torch::Tensor loss = CrossEntropyReference(logits, targets, z, ls, &r.log_z);
  loss.backward(g);
  r.loss = loss.detach();
  r.dlogits = logits.grad();
  return r;
}

// 37 tokens over 1003 classes (not a multiple of 16), z-loss 1e-4 and 0.1,
// label smoothing 0 and 0.1, and an upstream gradient with zeros (padding).
TEST(FusedCrossEntropyTest, MatchesTheFormulaForwardAndBackward) {
  for (double z : {1e-4, 0.1}) {
    for (double ls : {0.0, 0.1}) {
      torch::manual_seed(7);
      const torch::Tensor logits = (torch::randn({37, 1003}, torch::kDouble) * 4.0).to(torch::kFloat);
      const torch::Tensor targets = torch::randint(0, 1003, {37}, torch::kLong);
      torch::Tensor g = torch::rand({37}).to(torch::kFloat);
      g.narrow(0, 30, 7).zero_();
      SCOPED_TRACE(testing::Message() << " z=" << z << " ls=" << ls);
      const CeResult truth = RunReferenceCe(logits.to(torch::kDouble), targets, g.to(torch::kDouble), z, ls);
      const CeResult got64 = RunFusedCe(logits.to(torch::kDouble), targets, g.to(torch::kDouble), z, ls);
      EXPECT_LT(MaxRelativeError(got64.loss, truth.loss), 1e-12);
      EXPECT_LT(MaxRelativeError(got64.log_z, truth.log_z), 1e-12);
      EXPECT_LT(MaxRelativeError(got64.dlogits, truth.dlogits), 1e-12);

      const CeResult got = RunFusedCe(logits, targets, g, z, ls);
      const CeResult unfused = RunReferenceCe(logits, targets, g, z, ls);
      ExpectNoWorseThanUnfused(got.loss, unfused.loss, truth.loss, "loss");
      ExpectNoWorseThanUnfused(got.log_z, unfused.log_z, truth.log_z, "log_z");
      ExpectNoWorseThanUnfused(got.dlogits, unfused.dlogits, truth.dlogits, "dlogits");
      // Padding rows get exactly zero gradient.
      EXPECT_EQ(got.dlogits.narrow(0, 30, 7).abs().max().item<double>(), 0.0);
    }
  }
}

// With 32128 classes (T5's vocabulary) in float32, as training runs it.
TEST(FusedCrossEntropyTest, T5VocabularyInFloat32) {
  torch::manual_seed(8);
  const torch::Tensor logits = torch::randn({20, 32128}) * 8.0f;
  const torch::Tensor targets = torch::randint(0, 32128, {20}, torch::kLong);
  const torch::Tensor g = torch::full({20}, 1.0f / 20);
  const CeResult got = RunFusedCe(logits, targets, g, 1e-4, 0.0);
  const CeResult unfused = RunReferenceCe(logits, targets, g, 1e-4, 0.0);
  const CeResult truth = RunReferenceCe(logits.to(torch::kDouble), targets, g.to(torch::kDouble), 1e-4, 0.0);
  ExpectNoWorseThanUnfused(got.loss, unfused.loss, truth.loss, "loss");
  ExpectNoWorseThanUnfused(got.dlogits, unfused.dlogits, truth.dlogits, "dlogits");
  // The gradient of each row sums to (1 + 2 z log Z) g - g: softmax sums to 1.
  const torch::Tensor row_sums = got.dlogits.to(torch::kDouble).sum(-1);
  const torch::Tensor expected = g.to(torch::kDouble) * (2e-4 * got.log_z.to(torch::kDouble));
  EXPECT_LT((row_sums - expected).abs().max().item<double>(), 1e-6);
}

TEST(FusedCrossEntropyTest, ANonFiniteLogitPoisonsItsRowOnly) {
  torch::Tensor logits = torch::randn({4, 50});
  logits[1][7] = std::numeric_limits<float>::quiet_NaN();
  logits[2][3] = std::numeric_limits<float>::infinity();
  const torch::Tensor targets = torch::zeros({4}, torch::kLong);
  fused::CrossEntropyOutput out = fused::CrossEntropy(logits, targets, 1e-4, 0.0);
  EXPECT_TRUE(std::isfinite(out.token_loss[0].item<float>()));
  EXPECT_TRUE(std::isnan(out.token_loss[1].item<float>()));
  EXPECT_TRUE(std::isnan(out.token_loss[2].item<float>()));
  EXPECT_TRUE(std::isfinite(out.token_loss[3].item<float>()));
}

TEST(FusedCrossEntropyTest, RefusesATargetOutsideTheVocabulary) {
  try {
    fused::CrossEntropy(torch::zeros({2, 10}), torch::tensor({3, 10}, torch::kLong), 1e-4, 0.0);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("target 10 is outside [0, 10)"));
  }
  EXPECT_THROW(fused::CrossEntropy(torch::zeros({2, 10}), torch::zeros({3}, torch::kLong), 1e-4, 0.0), c10::Error);
}

TEST(FusedTest, TheSwitchTurnsEveryPathOff) {
  const torch::Tensor x = torch::ones({2, 4});
  EXPECT_TRUE(fused::RmsNormApplies(x, torch::ones({4})));
  EXPECT_TRUE(fused::CrossEntropyApplies(x));
  fused::SetEnabled(false);
  EXPECT_FALSE(fused::RmsNormApplies(x, torch::ones({4})));
  EXPECT_FALSE(fused::GatedGeluApplies(x, x));
  EXPECT_FALSE(fused::CrossEntropyApplies(x));
  fused::SetEnabled(true);
  EXPECT_FALSE(fused::CrossEntropyApplies(x.to(torch::kBFloat16)));
  EXPECT_FALSE(fused::RmsNormApplies(x, torch::ones({4}, torch::kDouble)));
}

}  // namespace
}  // namespace trainyard

#include "trainer/optimizer.h"

#include <cmath>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(AdamWTest, FirstStepIsLearningRateTimesSignPlusDecay) {
  // Step 1: m_hat = g, v_hat = g^2, so the update is g / (|g| + eps) + wd p.
  NamedTensors params = {{"w", torch::tensor({1.0f, -2.0f, 0.5f})}};
  OptimizerConfig config;
  config.mutable_adamw()->set_weight_decay(0.1f);
  config.mutable_adamw()->set_epsilon(1e-8f);
  auto opt = CreateOptimizer(config, params);
  ASSERT_TRUE(opt.ok());
  (*opt)->Apply({torch::tensor({0.3f, -4.0f, 0.0f})}, 0.01);
  const torch::Tensor w = params[0].second;
  EXPECT_NEAR(w[0].item<float>(), 1.0f - 0.01f * (1.0f + 0.1f * 1.0f), 1e-6);
  EXPECT_NEAR(w[1].item<float>(), -2.0f - 0.01f * (-1.0f + 0.1f * -2.0f), 1e-6);
  EXPECT_NEAR(w[2].item<float>(), 0.5f - 0.01f * (0.1f * 0.5f), 1e-6);  // zero gradient
  EXPECT_EQ((*opt)->step(), 1);
}

TEST(AdamWTest, SecondStepUsesBiasCorrectedMoments) {
  NamedTensors params = {{"w", torch::tensor({0.0f})}};
  OptimizerConfig config;
  config.mutable_adamw()->set_weight_decay(0.0f);
  auto opt = CreateOptimizer(config, params);
  ASSERT_TRUE(opt.ok());
  (*opt)->Apply({torch::tensor({1.0f})}, 1.0);
  (*opt)->Apply({torch::tensor({3.0f})}, 1.0);
  const double m = 0.9 * 0.1 * 1 + 0.1 * 3, v = 0.999 * 0.001 * 1 + 0.001 * 9;
  const double m_hat = m / (1 - 0.81), v_hat = v / (1 - 0.999 * 0.999);
  EXPECT_NEAR(params[0].second.item<double>(), -1.0 - m_hat / (std::sqrt(v_hat) + 1e-8), 1e-5);
}

TEST(AdamWTest, TheFusedUpdateEqualsTheTensorOpUpdate) {
  // A contiguous parameter takes the one-pass update; a transposed view the
  // tensor-op one. Over 20 steps of random gradients they agree to float
  // rounding.
  torch::manual_seed(3);
  const torch::Tensor start = torch::randn({64, 48});
  NamedTensors fused = {{"w", start.clone()}};
  NamedTensors plain = {{"w", start.t().contiguous().t()}};  // same values, not contiguous
  ASSERT_FALSE(plain[0].second.is_contiguous());
  OptimizerConfig config;
  config.mutable_adamw()->set_weight_decay(0.01f);
  auto a = CreateOptimizer(config, fused);
  auto b = CreateOptimizer(config, plain);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 20; ++i) {
    const torch::Tensor g = torch::randn({64, 48});
    (*a)->Apply({g}, 1e-2);
    (*b)->Apply({g.t().contiguous().t()}, 1e-2);
  }
  EXPECT_TRUE(torch::allclose(fused[0].second, plain[0].second, /*rtol=*/1e-5, /*atol=*/1e-6));
  EXPECT_GT((fused[0].second - start).abs().max().item<float>(), 0.1f);  // it did move
  EXPECT_TRUE(torch::allclose((*a)->State().at("w/v"), (*b)->State().at("w/v"), 1e-5, 1e-7));
}

TEST(AdafactorTest, FirstUnfactoredStepIsSignTimesParameterScale) {
  // decay at step 0 is 0, so v = g^2 + eps1 and u = g / |g|: RMS 1, no
  // clipping; scaled by lr and by max(RMS(p), eps2).
  NamedTensors params = {{"b", torch::tensor({3.0f, -4.0f})}};
  OptimizerConfig config;
  config.mutable_adafactor();
  auto opt = CreateOptimizer(config, params);
  ASSERT_TRUE(opt.ok());
  (*opt)->Apply({torch::tensor({0.5f, 2.0f})}, 0.1);
  const double rms_p = std::sqrt((9.0 + 16.0) / 2.0);
  EXPECT_NEAR(params[0].second[0].item<double>(), 3.0 - 0.1 * rms_p, 1e-5);
  EXPECT_NEAR(params[0].second[1].item<double>(), -4.0 - 0.1 * rms_p, 1e-5);
  auto state = (*opt)->State();
  EXPECT_TRUE(state.count("b/v"));
  EXPECT_EQ(state.at("step").item<int64_t>(), 1);
}

TEST(AdafactorTest, FactoredStepUsesRowAndColumnMeans) {
  // [[1, 2], [3, 4]] gradients, factoring forced (min_dim_size_to_factor 1),
  // no clipping, no parameter scale, lr 1.
  NamedTensors params = {{"w", torch::zeros({2, 2})}};
  OptimizerConfig config;
  config.mutable_adafactor()->set_min_dim_size_to_factor(1);
  config.mutable_adafactor()->set_clipping_threshold(0.0f);
  config.mutable_adafactor()->set_multiply_by_parameter_scale(false);
  auto opt = CreateOptimizer(config, params);
  ASSERT_TRUE(opt.ok());
  (*opt)->Apply({torch::tensor({{1.0f, 2.0f}, {3.0f, 4.0f}})}, 1.0);
  // v_row = row means of g^2 = [2.5, 12.5]; v_col = column means = [5, 10];
  // row factor = (v_row / mean(v_row))^-1/2 with mean 7.5; col factor v_col^-1/2.
  const double row[2] = {std::pow(2.5 / 7.5, -0.5), std::pow(12.5 / 7.5, -0.5)};
  const double col[2] = {std::pow(5.0, -0.5), std::pow(10.0, -0.5)};
  const double g[2][2] = {{1, 2}, {3, 4}};
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_NEAR(params[0].second[i][j].item<double>(), -g[i][j] * row[i] * col[j], 1e-5);
    }
  }
  auto state = (*opt)->State();
  EXPECT_TRUE(state.count("w/v_row") && state.count("w/v_col") && !state.count("w/v"));
}

// Adafactor's factored update of contiguous 2-D parameters (three passes,
// double sums) against the tensor-op formula (taken by the same values as
// non-contiguous views): 20 steps with clipping, the parameter scale and
// weight decay, with the larger dimension first and second and more rows
// than one block.
TEST(AdafactorTest, TheFusedFactoredUpdateMatchesTheTensorOpUpdate) {
  torch::manual_seed(4);
  const std::vector<std::vector<int64_t>> shapes = {{150, 37}, {23, 90}, {24, 24}};
  NamedTensors fused, plain;
  std::vector<torch::Tensor> starts;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const torch::Tensor start = torch::randn(shapes[i]);
    starts.push_back(start);
    fused.push_back({"w" + std::to_string(i), start.clone()});
    plain.push_back({"w" + std::to_string(i), start.t().contiguous().t()});
    ASSERT_FALSE(plain.back().second.is_contiguous());
  }
  OptimizerConfig config;
  config.mutable_adafactor()->set_min_dim_size_to_factor(16);
  config.mutable_adafactor()->set_weight_decay_rate(0.001f);
  config.mutable_adafactor()->set_clipping_threshold(0.5f);  // clips: u's RMS is about 1
  auto a = CreateOptimizer(config, fused);
  auto b = CreateOptimizer(config, plain);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int step = 0; step < 20; ++step) {
    std::vector<torch::Tensor> ga, gb;
    for (const auto& shape : shapes) {
      const torch::Tensor g = torch::randn(shape) * (step + 1);
      ga.push_back(g);
      gb.push_back(g.t().contiguous().t());
    }
    (*a)->Apply(ga, 1e-2);
    (*b)->Apply(gb, 1e-2);
  }
  const auto state_a = (*a)->State(), state_b = (*b)->State();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string name = fused[i].first;
    EXPECT_TRUE(torch::allclose(fused[i].second, plain[i].second, /*rtol=*/1e-5, /*atol=*/1e-6)) << name;
    EXPECT_GT((fused[i].second - starts[i]).abs().max().item<float>(), 1e-3f) << name;  // it did move
    for (const char* slot : {"/v_row", "/v_col"}) {
      EXPECT_TRUE(torch::allclose(state_a.at(name + slot), state_b.at(name + slot), 1e-5, 1e-7)) << name << slot;
    }
  }
}

// The fused factored update sums in fixed blocks of rows, so the bits do
// not depend on how many threads share them.
TEST(AdafactorTest, TheFusedFactoredUpdateIsTheSameOnAnyThreadCount) {
  torch::manual_seed(5);
  const torch::Tensor start = torch::randn({517, 65});
  const torch::Tensor grad = torch::randn({517, 65});
  std::vector<torch::Tensor> results;
  const int threads_before = at::get_num_threads();
  for (int threads : {1, 3}) {
    at::set_num_threads(threads);
    NamedTensors params = {{"w", start.clone()}};
    OptimizerConfig config;
    config.mutable_adafactor()->set_min_dim_size_to_factor(16);
    auto opt = CreateOptimizer(config, params);
    ASSERT_TRUE(opt.ok());
    ASSERT_EQ((*opt)->State().count("w/v_row"), 1u);
    (*opt)->Apply({grad}, 1e-2);
    (*opt)->Apply({grad * 2}, 1e-2);
    results.push_back(params[0].second);
  }
  at::set_num_threads(threads_before);
  EXPECT_TRUE(torch::equal(results[0], results[1]));
  EXPECT_FALSE(torch::equal(results[0], start));
}

TEST(OptimizerTest, StateRoundTripsAndResumesIdentically) {
  auto make = [](NamedTensors* params) {
    OptimizerConfig config;
    config.mutable_adafactor()->set_beta1(0.9f);
    return std::move(CreateOptimizer(config, *params)).value();
  };
  torch::manual_seed(0);
  const torch::Tensor init = torch::randn({130, 140});
  const torch::Tensor g1 = torch::randn({130, 140}), g2 = torch::randn({130, 140});
  NamedTensors a = {{"w", init.clone()}}, b = {{"w", init.clone()}};
  auto opt_a = make(&a);
  opt_a->Apply({g1}, 0.01);
  auto opt_b = make(&b);
  b[0].second.copy_(a[0].second);
  ASSERT_THAT(opt_b->LoadState(opt_a->State()), IsOk());
  opt_a->Apply({g2}, 0.01);
  opt_b->Apply({g2}, 0.01);
  EXPECT_TRUE(torch::equal(a[0].second, b[0].second));
  EXPECT_EQ(opt_b->step(), 2);
  std::map<std::string, torch::Tensor> broken = opt_a->State();
  broken.erase("w/m");
  EXPECT_THAT(opt_b->LoadState(broken), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"w/m\" is missing")));
}

TEST(OptimizerTest, GlobalNormClipping) {
  std::vector<torch::Tensor> grads = {torch::tensor({3.0f}), torch::tensor({4.0f})};
  EXPECT_DOUBLE_EQ(ClipByGlobalNorm(grads, 1.0), 5.0);
  EXPECT_NEAR(grads[0].item<float>(), 0.6f, 1e-6);
  EXPECT_NEAR(grads[1].item<float>(), 0.8f, 1e-6);
  EXPECT_NEAR(ClipByGlobalNorm(grads, 10.0), 1.0, 1e-6);  // under the limit: unchanged
  EXPECT_NEAR(grads[1].item<float>(), 0.8f, 1e-6);
}

TEST(OptimizerTest, BadHyperParameters) {
  NamedTensors params = {{"w", torch::zeros({2})}};
  OptimizerConfig config;
  config.mutable_adafactor()->set_decay_rate(1.5f);
  EXPECT_THAT(CreateOptimizer(config, params).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("adafactor")));
  config.mutable_adamw()->set_beta2(1.0f);
  EXPECT_THAT(CreateOptimizer(config, params).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("adamw")));
}

}  // namespace
}  // namespace trainyard

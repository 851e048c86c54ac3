// Adafactor against optax.adafactor (run by adafactor_parity_test.sh after
// make_reference.py): the same initial parameters and 20 steps of the same
// gradients must give the same parameters after every step, to a relative
// error (||ours - optax|| / ||optax||) of at most 1e-5.
//
// usage: adafactor_parity_check REFERENCE.safetensors
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "model/weights.h"
#include "trainer/optimizer.h"

namespace trainyard {
namespace {

std::string g_reference;
const char* kNames[] = {"wide", "tall", "cube", "small", "vector"};

void Check(const std::string& prefix, const OptimizerConfig& config) {
  absl::StatusOr<TensorMap> ref = ReadTensors(g_reference);
  ASSERT_TRUE(ref.ok()) << ref.status();
  NamedTensors params;
  for (const char* name : kNames) {
    params.emplace_back(name, ref->at(prefix + "/init/" + name).clone());
  }
  auto optimizer = CreateOptimizer(config, params);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  double worst = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<torch::Tensor> grads;
    for (const char* name : kNames) {
      grads.push_back(ref->at(prefix + "/grad" + std::to_string(step) + "/" + name));
    }
    (*optimizer)->Apply(grads, /*learning_rate=*/0.01);
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& want = ref->at(prefix + "/param" + std::to_string(step) + "/" + kNames[i]);
      const double rel = ((params[i].second - want).norm() / want.norm()).item<double>();
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-5) << prefix << " step " << step << " " << kNames[i];
    }
  }
  std::printf("%s: worst relative error over 20 steps: %.3g\n", prefix.c_str(), worst);
}

TEST(AdafactorParityTest, T5XDefaultsMatchOptax) {
  OptimizerConfig config;
  config.mutable_adafactor();
  Check("default", config);
}

TEST(AdafactorParityTest, MomentumWeightDecayAndClippingMatchOptax) {
  OptimizerConfig config;
  config.mutable_adafactor()->set_beta1(0.9f);
  config.mutable_adafactor()->set_weight_decay_rate(1e-3f);
  config.mutable_adafactor()->set_clipping_threshold(0.5f);
  Check("momentum", config);
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s REFERENCE.safetensors\n", argv[0]);
    return 2;
  }
  trainyard::g_reference = argv[1];
  return RUN_ALL_TESTS();
}

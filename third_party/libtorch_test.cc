// Checks that the LibTorch this build links (Debian's by default, or the
// prefix in TRAINYARD_LIBTORCH) works: tensor math and autograd against closed
// forms, and c10d's Gloo process group (which needs USE_C10D_GLOO and the
// Gloo headers) at world size 1.
#include <torch/torch.h>

#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include "gtest/gtest.h"

namespace {

TEST(LibTorchTest, MatmulMatchesClosedForm) {
  torch::Tensor a = torch::arange(6, torch::kFloat32).reshape({2, 3});
  torch::Tensor b = torch::ones({3, 2});
  torch::Tensor c = torch::matmul(a, b);
  // Row sums of [[0,1,2],[3,4,5]].
  EXPECT_TRUE(torch::equal(c, torch::tensor({{3.0f, 3.0f}, {12.0f, 12.0f}})));
}

TEST(LibTorchTest, AutogradOfSumOfSquaresIsTwiceTheInput) {
  torch::Tensor x = torch::tensor({1.0f, -2.0f, 3.5f}, torch::requires_grad());
  torch::Tensor y = (x * x).sum();
  y.backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::tensor({2.0f, -4.0f, 7.0f})));
}

#ifdef USE_C10D_GLOO
TEST(LibTorchTest, GlooProcessGroupAllReduceAtWorldSizeOne) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(store, /*rank=*/0, /*size=*/1, options);
  std::vector<torch::Tensor> tensors = {torch::full({4}, 2.5f)};
  group.allreduce(tensors)->wait();
  EXPECT_TRUE(torch::equal(tensors[0], torch::full({4}, 2.5f)));
}
#endif

}  // namespace

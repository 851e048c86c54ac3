// NCCL on a GPU machine: world size 1, and every visible GPU as one rank
// (threads of this process) when there are several. Skipped, with the
// reason, where LibTorch has no CUDA or no GPU is visible.
#include "collective/nccl_collective.h"

#include <thread>

#include <torch/cuda.h>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

// GTEST_SKIP only leaves the function it is in: each test skips itself.
bool NoGpu() { return !torch::cuda::is_available(); }

TEST(NcclCollectiveTest, WorldSizeOne) {
  if (NoGpu()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  auto c = NcclCollective::Create(0, 1, std::make_shared<InMemoryStore>(), NcclOptions{});
  ASSERT_THAT(c.status(), IsOk());
  std::vector<torch::Tensor> t = {torch::arange(1 << 20, torch::TensorOptions().device(torch::kCUDA, 0))};
  ASSERT_THAT((*c)->AllReduce(t, ReduceOp::kSum), IsOk());
  EXPECT_TRUE(torch::equal(t[0].cpu(), torch::arange(1 << 20)));
  // Host tensors travel through the device and come back reduced.
  std::vector<torch::Tensor> cpu = {torch::tensor({2.0, 3.0}, torch::kDouble)};
  ASSERT_THAT((*c)->AllReduce(cpu, ReduceOp::kMax), IsOk());
  EXPECT_TRUE(cpu[0].device().is_cpu());
  EXPECT_EQ(cpu[0][1].item<double>(), 3.0);
  std::vector<torch::Tensor> gathered;
  ASSERT_THAT((*c)->AllGather(torch::arange(4), &gathered), IsOk());
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(gathered[0].device().is_cpu());
  EXPECT_TRUE(torch::equal(gathered[0], torch::arange(4)));
}

TEST(NcclCollectiveTest, EveryGpuOneRank) {
  if (NoGpu()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  const int world = static_cast<int>(torch::cuda::device_count());
  if (world < 2) GTEST_SKIP() << "one GPU: the multi-rank case needs two or more";
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      NcclOptions options;
      options.device = rank;
      auto c = NcclCollective::Create(rank, world, store, options);
      ASSERT_THAT(c.status(), IsOk());
      const auto on = torch::TensorOptions().device(torch::kCUDA, rank);
      for (int64_t n : {int64_t{1}, int64_t{1} << 24}) {  // 4 B to 64 MB
        std::vector<torch::Tensor> t = {torch::full({n}, static_cast<float>(rank + 1), on)};
        ASSERT_THAT((*c)->AllReduce(t, ReduceOp::kSum), IsOk());
        EXPECT_EQ(t[0][n - 1].item<float>(), world * (world + 1) / 2.0f);
      }
      std::vector<torch::Tensor> m = {torch::full({3}, static_cast<float>(rank), on)};
      ASSERT_THAT((*c)->AllReduce(m, ReduceOp::kMax), IsOk());
      EXPECT_EQ(m[0][0].item<float>(), world - 1.0f);
      EXPECT_THAT((*c)->Barrier(), IsOk());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace trainyard

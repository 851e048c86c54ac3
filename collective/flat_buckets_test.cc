#include "collective/flat_buckets.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

TEST(FlatBucketsTest, PacksPerDtypeInOrderUpToTheLimit) {
  // 3 floats of 16 bytes each and one long of 16. Dtypes go in the enum's
  // order (long before float); a 40-byte limit packs the first two floats,
  // then the third alone. A lone tensor is a view, not a copy.
  std::vector<torch::Tensor> tensors = {torch::full({4}, 1.0f), torch::full({2, 2}, 2.0f),
                                        torch::tensor({7, 8}, torch::kLong), torch::full({4}, 3.0f)};
  std::vector<FlatBucket> buckets = PackFlatBuckets(tensors, 40);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].flat.scalar_type(), torch::kLong);
  EXPECT_EQ(buckets[0].flat.data_ptr(), tensors[2].data_ptr());
  EXPECT_EQ(buckets[1].flat.numel(), 8);
  EXPECT_EQ(buckets[1].members.size(), 2u);
  EXPECT_TRUE(torch::equal(buckets[1].flat, torch::cat({torch::full({4}, 1.0f), torch::full({4}, 2.0f)})));
  EXPECT_EQ(buckets[2].flat.numel(), 4);
  EXPECT_TRUE(buckets[2].members.empty());
  EXPECT_EQ(buckets[2].flat.data_ptr(), tensors[3].data_ptr());
}

TEST(FlatBucketsTest, UnpackWritesTheFlatBufferBackIntoEveryMember) {
  std::vector<torch::Tensor> tensors = {torch::zeros({2}), torch::zeros({3, 1})};
  std::vector<FlatBucket> buckets = PackFlatBuckets(tensors, 1 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  buckets[0].flat.copy_(torch::arange(5, torch::kFloat));
  UnpackFlatBucket(buckets[0]);
  EXPECT_TRUE(torch::equal(tensors[0], torch::tensor({0.0f, 1.0f})));
  EXPECT_TRUE(torch::equal(tensors[1], torch::tensor({2.0f, 3.0f, 4.0f}).view({3, 1})));
}

TEST(FlatBucketsTest, ALargeTensorIsCutIntoViewsOfTheLimit) {
  torch::Tensor big = torch::zeros({10});  // 40 bytes
  std::vector<FlatBucket> buckets = PackFlatBuckets({torch::ones({1}), big}, 16);
  ASSERT_EQ(buckets.size(), 4u);  // the small one, then 4 + 4 + 2 floats of the big one
  EXPECT_EQ(buckets[1].flat.numel(), 4);
  EXPECT_EQ(buckets[3].flat.numel(), 2);
  buckets[3].flat.fill_(5.0f);  // views: writes land in `big`
  EXPECT_EQ(big[9].item<float>(), 5.0f);
  EXPECT_EQ(big[7].item<float>(), 0.0f);
}

TEST(FlatBucketsTest, ANonContiguousTensorIsCopiedAndWrittenBack) {
  torch::Tensor base = torch::zeros({2, 3});
  torch::Tensor transposed = base.t();  // not contiguous
  std::vector<FlatBucket> buckets = PackFlatBuckets({transposed}, 1 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  ASSERT_EQ(buckets[0].members.size(), 1u);
  buckets[0].flat.copy_(torch::arange(6, torch::kFloat));
  UnpackFlatBucket(buckets[0]);
  EXPECT_TRUE(torch::equal(transposed, torch::arange(6, torch::kFloat).view({3, 2})));
}

}  // namespace
}  // namespace trainyard

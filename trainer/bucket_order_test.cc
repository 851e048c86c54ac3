// The T5 model's parameter order against the gradient reducer's strict
// bucket order: backward must find each bucket's gradients ready in turn,
// or the gradients of every later bucket are held until the late one is.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "collective/fake_collective.h"
#include "gtest/gtest.h"
#include "model/loss.h"
#include "model/t5.h"
#include "spec/presets.h"
#include "trainer/gradient_reducer.h"

namespace trainyard {
namespace {

T5Batch Batch() {
  torch::manual_seed(3);
  T5Batch b;
  b.encoder_input_tokens = torch::randint(2, 500, {4, 12}, torch::kLong);
  b.decoder_target_tokens = torch::randint(2, 500, {4, 8}, torch::kLong);
  b.decoder_input_tokens = torch::zeros_like(b.decoder_target_tokens);
  b.decoder_input_tokens.narrow(1, 1, 7).copy_(b.decoder_target_tokens.narrow(1, 0, 7));
  b.decoder_loss_weights = torch::ones({4, 8});
  return b;
}

// One armed backward pass over `params` (in that order) with small buckets;
// returns the most gradient elements held back by the start order.
int64_t PeakWaiting(T5& model, const std::vector<torch::Tensor>& params, int64_t* total) {
  auto group = std::make_shared<FakeGroup>(1, absl::Seconds(5));
  FakeCollective collective(group, 0);
  GradientReducer reducer(params, &collective, /*bucket_bytes=*/64 << 10);
  reducer.Arm();
  ForwardOptions options;
  const T5Batch batch = Batch();
  ComputeLoss(model->forward(batch, options), batch.decoder_target_tokens, batch.decoder_loss_weights, LossOptions())
      .loss.backward();
  EXPECT_TRUE(reducer.Finish().ok());
  *total = 0;
  for (const torch::Tensor& p : params) *total += p.numel();
  return reducer.peak_waiting_elements();
}

TEST(BucketOrderTest, BackwardFindsTheBucketsReadyInTurn) {
  ModelConfig config = *PresetConfig("tiny");
  config.set_dropout_rate(0.0f);
  T5 model(config);
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  int64_t total = 0;
  const int64_t waiting = PeakWaiting(model, params, &total);
  // What waits is at most a bucket's partners and the position-bias tables
  // (used by every layer, in the last buckets): a few percent of the model.
  EXPECT_LT(waiting, total / 20) << waiting << " of " << total;
  std::cout << "held back in the model's order: " << waiting << " of " << total << " elements\n";

  // The order before: the encoder's final norm after the decoder. Its bucket
  // becomes ready only when backward reaches the encoder, so every decoder
  // layer's gradients wait behind it.
  const auto norm = std::find(names.begin(), names.end(), "encoder_norm.scale");
  ASSERT_NE(norm, names.end());
  std::vector<torch::Tensor> before;
  torch::Tensor encoder_norm;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "encoder_norm.scale") {
      encoder_norm = params[i];
    } else {
      before.push_back(params[i]);
    }
    if (names[i] == "decoder_norm.scale") before.push_back(encoder_norm);
  }
  ASSERT_EQ(before.size(), params.size());
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  const int64_t held = PeakWaiting(model, before, &total);
  EXPECT_GT(held, total / 4) << held << " of " << total;
  std::cout << "with the encoder norm after the decoder: " << held << "\n";
}

}  // namespace
}  // namespace trainyard

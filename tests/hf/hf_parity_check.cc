// Parity with Hugging Face transformers (run by hf_parity_test.sh after
// make_reference.py): imports a transformers T5 checkpoint, checks that our
// model reproduces transformers' logits (max |diff| <= 1e-4), loss and greedy
// decoding on the reference batch, then exports it back to Hugging Face's
// layout with our logits for verify_export.py.
//
// usage: hf_parity_check HF_DIR OUT_DIR
#include <cstdio>
#include <string>

#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "model/encoder_decoder_model.h"
#include "model/weights.h"

namespace trainyard {
namespace {

std::string g_hf_dir;
std::string g_out_dir;

TEST(HfParityTest, ImportedModelMatchesTransformers) {
  absl::StatusOr<HfCheckpoint> hf = ImportHf(g_hf_dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto model = EncoderDecoderModel::Create(hf->config, {});
  ASSERT_TRUE(model.ok()) << model.status();
  T5Impl& net = *(*model)->network();
  ASSERT_TRUE(AssignParameters(hf->tensors, /*strict=*/true, &net).ok());

  absl::StatusOr<TensorMap> ref = ReadTensors(g_hf_dir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();
  T5Batch batch;
  batch.encoder_input_tokens = ref->at("encoder_input_tokens").to(torch::kLong);
  batch.decoder_input_tokens = ref->at("decoder_input_tokens").to(torch::kLong);
  batch.decoder_target_tokens = ref->at("decoder_target_tokens").to(torch::kLong);
  batch.decoder_loss_weights = torch::ones(batch.decoder_target_tokens.sizes());

  torch::NoGradGuard no_grad;
  const torch::Tensor logits = net.forward(batch, {});
  const double diff = (logits - ref->at("logits")).abs().max().item<double>();
  std::printf("%s: max |logits - transformers| = %.3g\n", g_hf_dir.c_str(), diff);
  EXPECT_LE(diff, 1e-4);

  LossOptions no_z;
  no_z.z_loss = 0.0;  // transformers' loss is the plain mean cross-entropy
  const double loss =
      ComputeLoss(logits, batch.decoder_target_tokens, batch.decoder_loss_weights, no_z).loss.item<double>();
  EXPECT_NEAR(loss, ref->at("loss").item<double>(), 1e-4);

  DecodeOptions greedy;
  greedy.max_decode_length = ref->at("greedy").size(1);
  absl::StatusOr<Predictions> predicted = (*model)->PredictBatchWithAux(batch, greedy);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  EXPECT_TRUE(torch::equal(predicted->tokens, ref->at("greedy").to(torch::kLong)))
      << predicted->tokens << "\nvs transformers\n"
      << ref->at("greedy");

  // Export for verify_export.py, with our logits beside it.
  ASSERT_TRUE(ExportHf(net, g_out_dir + "/exported").ok());
  torch::Tensor ours = logits.contiguous();
  ASSERT_TRUE(WriteSafetensors(g_out_dir + "/ours.safetensors",
                               {{"logits", SafeDtype::kF32, ours.sizes().vec(), ours.data_ptr()}})
                  .ok());
}

TEST(HfParityTest, WrongShapeOrUnknownTensorNamesTheTensor) {
  absl::StatusOr<HfCheckpoint> hf = ImportHf(g_hf_dir);
  ASSERT_TRUE(hf.ok());
  auto model = EncoderDecoderModel::Create(hf->config, {});
  ASSERT_TRUE(model.ok());
  T5Impl& net = *(*model)->network();
  const torch::Tensor before = net.token_embedder->weight.clone();
  TensorMap bad = hf->tensors;
  bad["encoder_layers.1.mlp.wo.weight"] = torch::zeros({3, 3});
  absl::Status status = AssignParameters(bad, /*strict=*/true, &net);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("\"encoder_layers.1.mlp.wo.weight\" has shape [3, 3]"), std::string::npos) << status;
  // Nothing was loaded: all-or-nothing.
  EXPECT_TRUE(torch::equal(net.token_embedder->weight, before));
  bad = hf->tensors;
  bad["encoder.extra"] = torch::zeros({1});
  bad.erase("decoder_norm.scale");
  status = AssignParameters(bad, /*strict=*/true, &net);
  EXPECT_NE(status.message().find("\"decoder_norm.scale\" is missing"), std::string::npos) << status;
  EXPECT_NE(status.message().find("\"encoder.extra\" is not a parameter"), std::string::npos) << status;
  EXPECT_TRUE(AssignParameters(bad, /*strict=*/false, &net).ok());
}

}  // namespace
}  // namespace trainyard

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HF_DIR OUT_DIR\n", argv[0]);
    return 2;
  }
  trainyard::g_hf_dir = argv[1];
  trainyard::g_out_dir = argv[2];
  return RUN_ALL_TESTS();
}

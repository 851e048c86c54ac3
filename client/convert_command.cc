// `trainyard convert`: Hugging Face T5 checkpoints to Trainyard checkpoints
// and back, so public T5 weights can be fine-tuned and results handed back to
// the Python world.
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/flags.h"
#include "model/encoder_decoder_model.h"
#include "model/weights.h"

namespace trainyard {

int RunConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string from_hf, vocab, out_dir, checkpoint, to_hf;
  FlagSet flags(
      "convert (--from-hf HF_DIR [--vocab SPM_MODEL] --out CHECKPOINT_DIR | "
      "--checkpoint CHECKPOINT_DIR --to-hf OUT_DIR)",
      "Converts between Hugging Face T5 checkpoints (config.json +\n"
      "model.safetensors; T5 v1.0 and v1.1) and Trainyard checkpoints. The new\n"
      "directory must not exist; it appears only when complete.");
  flags.AddString("from-hf", &from_hf, "HF_DIR", "a Hugging Face T5 checkpoint directory");
  flags.AddString("vocab", &vocab, "SPM_MODEL", "SentencePiece model stored with the checkpoint");
  flags.AddString("out", &out_dir, "CHECKPOINT_DIR", "the Trainyard checkpoint to write");
  flags.AddString("checkpoint", &checkpoint, "CHECKPOINT_DIR", "a Trainyard checkpoint to export");
  flags.AddString("to-hf", &to_hf, "OUT_DIR", "where to write the Hugging Face checkpoint");
  std::vector<std::string> positional;
  if (absl::optional<int> exit_code = flags.ParseCommand(args, &positional, out, err)) {
    return *exit_code;
  }
  const bool import = !from_hf.empty() && !out_dir.empty() && checkpoint.empty() && to_hf.empty();
  const bool export_hf = !checkpoint.empty() && !to_hf.empty() && from_hf.empty() && out_dir.empty() && vocab.empty();
  if (!positional.empty() || import == export_hf) {
    err << "error: give either --from-hf and --out, or --checkpoint and --to-hf\n" << flags.Help();
    return kExitUsage;
  }
  auto fail = [&](const absl::Status& status) {
    err << "error: " << status.message() << "\n";
    // Bad or missing input is the user's to fix; anything else is a failure.
    return status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kNotFound ||
                   status.code() == absl::StatusCode::kAlreadyExists || status.code() == absl::StatusCode::kDataLoss
               ? kExitUsage
               : kExitFailed;
  };
  if (import) {
    absl::StatusOr<HfCheckpoint> hf = ImportHf(from_hf);
    if (!hf.ok()) return fail(hf.status());
    auto model = EncoderDecoderModel::Create(hf->config, {});
    if (!model.ok()) return fail(model.status());
    absl::Status status = AssignParameters(hf->tensors, /*strict=*/true, (*model)->network().get());
    if (status.ok()) {
      status = WriteModelCheckpoint(*(*model)->network(), out_dir, /*step=*/0, "hf:" + from_hf, vocab);
    }
    if (!status.ok()) return fail(status);
    out << "wrote " << out_dir << " (" << (*model)->network()->NumParameters() << " parameters)\n";
    return kExitOk;
  }
  absl::StatusOr<ModelCheckpoint> ckpt = ReadModelCheckpoint(checkpoint);
  if (!ckpt.ok()) return fail(ckpt.status());
  auto model = EncoderDecoderModel::Create(ckpt->config, {});
  if (!model.ok()) return fail(model.status());
  absl::Status status = AssignParameters(ckpt->tensors, /*strict=*/true, (*model)->network().get());
  if (status.ok()) status = ExportHf(*(*model)->network(), to_hf);
  if (!status.ok()) return fail(status);
  out << "wrote " << to_hf << " (config.json, model.safetensors)\n";
  return kExitOk;
}

}  // namespace trainyard

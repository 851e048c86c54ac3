// `trainyard convert`: Hugging Face T5 checkpoints to Trainyard checkpoints
// and back, and T5X checkpoints in and out, so public T5 weights can be
// fine-tuned and results handed back to the Python world.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/t5x_checkpoint.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/status_macros.h"
#include "data/hf_tokenizer.h"
#include "model/encoder_decoder_model.h"
#include "model/t5x_export.h"
#include "model/t5x_import.h"
#include "model/weights.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {

namespace {

// A Hugging Face T5 checkpoint to a Trainyard checkpoint at step 0, with
// its vocabulary (--vocab, else the directory's spiece.model) when it has
// one.
absl::Status ImportFromHf(const std::string& from_hf, const std::string& vocab, const std::string& out_dir,
                          std::ostream& out) {
  TY_ASSIGN_OR_RETURN(HfCheckpoint hf, ImportHf(from_hf));
  absl::StatusOr<HfTokenizer> tokenizer = ReadHfTokenizer(from_hf, vocab, hf.config.vocab_size());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(), absl::StrCat("vocabulary: ", tokenizer.status().message()));
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<EncoderDecoderModel> model, EncoderDecoderModel::Create(hf.config, {}));
  TY_RETURN_IF_ERROR(AssignParameters(hf.tensors, /*strict=*/true, model->network().get()));
  TY_RETURN_IF_ERROR(WriteModelCheckpoint(*model->network(), out_dir, /*step=*/0, "hf:" + from_hf, tokenizer->spiece,
                                          tokenizer->extra_ids));
  out << "wrote " << out_dir << " (" << model->network()->NumParameters() << " parameters, "
      << (tokenizer->spiece.empty()
              ? std::string("no vocabulary: give --vocab SPM_MODEL")
              : absl::StrCat("vocabulary ", tokenizer->spiece, " with ", tokenizer->extra_ids, " extra ids"))
      << ")\n";
  return absl::OkStatus();
}

// A T5X checkpoint to a Trainyard checkpoint at its step: a training
// checkpoint when it holds Adafactor's statistics, else a model checkpoint.
absl::Status ImportFromT5x(const std::string& from_t5x, const std::string& out_dir, std::ostream& out) {
  TY_ASSIGN_OR_RETURN(T5xImport t5x, ImportT5x(from_t5x));
  TY_ASSIGN_OR_RETURN(std::unique_ptr<EncoderDecoderModel> model, EncoderDecoderModel::Create(t5x.config, {}));
  // Every parameter of the model, none left over, every shape right.
  absl::Status status = AssignParameters(t5x.params, /*strict=*/true, model->network().get());
  if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat(t5x.dir, ": ", status.message()));
  const std::string source = "t5x:" + t5x.dir;
  if (t5x.optimizer.empty()) {
    status = WriteModelCheckpoint(*model->network(), out_dir, t5x.step, source, "");
  } else {
    // A training checkpoint without data positions: a job restoring it
    // takes its own data from the start.
    TrainSnapshot snapshot;
    snapshot.step = t5x.step;
    snapshot.config = model->network()->config();
    for (const auto& item : model->network()->named_parameters()) {
      snapshot.params.emplace_back(item.key(), item.value().detach());
    }
    snapshot.optimizer = t5x.optimizer;
    snapshot.world_size = 0;
    snapshot.source = source;
    status = WriteTrainCheckpoint(out_dir, snapshot, torch::kFloat);
  }
  TY_RETURN_IF_ERROR(status);
  out << "wrote " << out_dir << " from " << t5x.dir << " (step " << t5x.step << ", "
      << model->network()->NumParameters() << " parameters, "
      << (t5x.optimizer.empty() ? "no optimizer state: " + t5x.optimizer_note
                                : absl::StrCat(t5x.optimizer.size(), " Adafactor statistics"))
      << ")\n";
  return absl::OkStatus();
}

// A Trainyard checkpoint's model to a Hugging Face T5 checkpoint.
absl::Status ExportToHf(const std::string& checkpoint, const std::string& to_hf, std::ostream& out) {
  TY_ASSIGN_OR_RETURN(ModelCheckpoint ckpt, ReadModelCheckpoint(checkpoint));
  TY_ASSIGN_OR_RETURN(std::unique_ptr<EncoderDecoderModel> model, EncoderDecoderModel::Create(ckpt.config, {}));
  TY_RETURN_IF_ERROR(AssignParameters(ckpt.tensors, /*strict=*/true, model->network().get()));
  TY_RETURN_IF_ERROR(ExportHf(*model->network(), to_hf));
  if (ckpt.vocabulary.empty()) {
    out << "wrote " << to_hf << " (config.json, model.safetensors; the checkpoint has no vocabulary)\n";
    return absl::OkStatus();
  }
  TY_RETURN_IF_ERROR(WriteHfTokenizer(ckpt.vocabulary, ckpt.vocabulary_extra_ids, to_hf));
  out << "wrote " << to_hf
      << " (config.json, model.safetensors; spiece.model, tokenizer.json, tokenizer_config.json, "
         "special_tokens_map.json)\n";
  return absl::OkStatus();
}

// A Trainyard checkpoint to a T5X checkpoint, `model_dir`/checkpoint_<step>:
// the parameters in `dtype` (T5X's save dtype) and Adafactor's statistics,
// or the parameters and the step only (the reason printed).
absl::Status ExportToT5x(const std::string& checkpoint, const std::string& model_dir, const std::string& dtype,
                         int chunk_bytes, std::ostream& out) {
  if (dtype != "float32" && dtype != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat("--dtype ", dtype, ": float32 or bfloat16"));
  }
  if (chunk_bytes < 1) return absl::InvalidArgumentError(absl::StrCat("--chunk-bytes ", chunk_bytes, ": below 1"));
  TY_ASSIGN_OR_RETURN(TrainCheckpoint ckpt, ReadTrainCheckpoint(checkpoint));
  std::ifstream in(ckpt.dir + "/metadata.json", std::ios::binary);  // verified by ReadTrainCheckpoint
  std::stringstream metadata;
  metadata << in.rdbuf();
  absl::StatusOr<std::string> why_not = WhyNotAdafactorState(metadata.str(), ckpt.optimizer);
  if (!why_not.ok()) {
    return absl::Status(why_not.status().code(), absl::StrCat(ckpt.dir, "/", why_not.status().message()));
  }
  if (!why_not->empty()) ckpt.optimizer.clear();
  const size_t statistics = ckpt.optimizer.size() - ckpt.optimizer.count("step");
  absl::StatusOr<T5xCheckpoint> t5x =
      ExportT5x(ckpt.params, ckpt.optimizer, ckpt.step, dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat);
  if (!t5x.ok()) return absl::Status(t5x.status().code(), absl::StrCat(checkpoint, ": ", t5x.status().message()));
  T5xWriteOptions options;
  options.chunk_bytes = static_cast<uint64_t>(chunk_bytes);
  TY_ASSIGN_OR_RETURN(const std::string written, WriteT5xCheckpoint(*t5x, model_dir, options));
  out << "wrote " << written << " from " << checkpoint << " (step " << ckpt.step << ", " << t5x->target.size()
      << " parameters as " << dtype << ", "
      << (why_not->empty() ? absl::StrCat(statistics, " Adafactor statistics")
                           : "parameters and step only: " + *why_not)
      << ")\n";
  return absl::OkStatus();
}

}  // namespace

int RunConvert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const std::string& arg : args) {
    if (arg == "--from-gin" || arg.rfind("--from-gin=", 0) == 0) return RunConvertFromGin(args, out, err);
  }
  std::string from_hf, from_t5x, vocab, out_dir, checkpoint, to_hf, to_t5x, dtype;
  int chunk_bytes = 64 << 20;
  FlagSet flags(
      "convert (--from-hf HF_DIR [--vocab SPM_MODEL] --out CHECKPOINT_DIR | "
      "--from-t5x T5X_DIR --out CHECKPOINT_DIR | --checkpoint CHECKPOINT_DIR --to-hf OUT_DIR | "
      "--checkpoint CHECKPOINT_DIR --to-t5x T5X_MODEL_DIR [--dtype float32|bfloat16] | --from-gin RUN.gin ... --out "
      "SPEC.textproto)",
      "Converts between Hugging Face T5 checkpoints (config.json +\n"
      "model.safetensors; T5 v1.0 and v1.1) and Trainyard checkpoints, the\n"
      "vocabulary with them (HF's T5 tokenizer files: spiece.model,\n"
      "tokenizer.json, tokenizer_config.json), and\n"
      "between T5X checkpoints (msgpack + TensorStore; T5 1.0 and 1.1 layouts)\n"
      "and Trainyard checkpoints: the parameters, the step and Adafactor's\n"
      "statistics, so training goes on where the other stopped. --to-t5x\n"
      "writes T5X_MODEL_DIR/checkpoint_<step> as T5X's Checkpointer does; an\n"
      "AdamW checkpoint gives the parameters and the step only (T5X's\n"
      "Adafactor statistics cannot be made from AdamW's). The new directory\n"
      "(for --to-t5x, T5X_MODEL_DIR/checkpoint_<step>) must not exist; it\n"
      "appears only when complete. With --from-gin, converts a T5X training\n"
      "run's gin configuration into a job spec (its flags: convert --from-gin\n"
      "RUN.gin --help).");
  flags.AddString("from-hf", &from_hf, "HF_DIR", "a Hugging Face T5 checkpoint directory");
  flags.AddString("from-t5x", &from_t5x, "T5X_DIR",
                  "a T5X checkpoint_<step> directory (msgpack + TensorStore, or Orbax's with or without "
                  "OCDBT), or a model directory (its newest)");
  flags.AddString("vocab", &vocab, "SPM_MODEL",
                  "SentencePiece model stored with the checkpoint (default: HF_DIR/spiece.model, if any)");
  flags.AddString("out", &out_dir, "CHECKPOINT_DIR", "the Trainyard checkpoint to write");
  flags.AddString("checkpoint", &checkpoint, "CHECKPOINT_DIR", "a Trainyard checkpoint to export");
  flags.AddString("to-hf", &to_hf, "OUT_DIR", "where to write the Hugging Face checkpoint");
  flags.AddString("to-t5x", &to_t5x, "T5X_MODEL_DIR",
                  "the T5X model directory to write checkpoint_<step> in (created if need be)");
  flags.AddString("dtype", &dtype, "float32|bfloat16",
                  "with --to-t5x: the parameters' dtype (T5X's save dtype; default float32)");
  flags.AddInt("chunk-bytes", &chunk_bytes, "BYTES",
               "with --to-t5x: the largest TensorStore chunk (default 67108864, T5X's)");
  std::vector<std::string> positional;
  if (absl::optional<int> exit_code = flags.ParseCommand(args, &positional, out, err)) {
    return *exit_code;
  }
  const bool t5x_options = !dtype.empty() || chunk_bytes != (64 << 20);
  const bool import = !from_hf.empty() && !out_dir.empty() && checkpoint.empty() && to_hf.empty() && from_t5x.empty() &&
                      to_t5x.empty() && !t5x_options;
  const bool import_t5x = !from_t5x.empty() && !out_dir.empty() && from_hf.empty() && checkpoint.empty() &&
                          to_hf.empty() && vocab.empty() && to_t5x.empty() && !t5x_options;
  const bool export_hf = !checkpoint.empty() && !to_hf.empty() && from_hf.empty() && out_dir.empty() && vocab.empty() &&
                         from_t5x.empty() && to_t5x.empty() && !t5x_options;
  const bool export_t5x = !checkpoint.empty() && !to_t5x.empty() && from_hf.empty() && out_dir.empty() &&
                          vocab.empty() && from_t5x.empty() && to_hf.empty();
  if (!positional.empty() || import + import_t5x + export_hf + export_t5x != 1) {
    err << "error: give --from-hf and --out, --from-t5x and --out, --checkpoint and --to-hf, or --checkpoint "
           "and --to-t5x (--vocab goes with --from-hf; --dtype and --chunk-bytes with --to-t5x)\n"
        << flags.Help();
    return kExitUsage;
  }
  const absl::Status status =
      import       ? ImportFromHf(from_hf, vocab, out_dir, out)
      : import_t5x ? ImportFromT5x(from_t5x, out_dir, out)
      : export_hf  ? ExportToHf(checkpoint, to_hf, out)
                   : ExportToT5x(checkpoint, to_t5x, dtype.empty() ? "float32" : dtype, chunk_bytes, out);
  if (status.ok()) return kExitOk;
  err << "error: " << status.message() << "\n";
  // Bad or missing input is the user's to fix; anything else is a failure.
  return status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kNotFound ||
                 status.code() == absl::StatusCode::kAlreadyExists || status.code() == absl::StatusCode::kDataLoss
             ? kExitUsage
             : kExitFailed;
}

}  // namespace trainyard

// `trainyard vocab train`: trains a SentencePiece vocabulary with T5's
// special ids (pad 0, eos 1, unk 2) from text files.
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/flags.h"
#include "data/vocabulary.h"

namespace trainyard {

int RunVocab(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> inputs;
  std::string out_prefix;
  int size = 0;
  FlagSet flags("vocab train --input FILE... --size N --out PREFIX",
                "Trains a unigram SentencePiece vocabulary with T5's special ids (pad 0,\n"
                "eos 1, unk 2) on text files, one sentence per line; writes PREFIX.model\n"
                "and PREFIX.vocab.");
  flags.AddRepeated("input", &inputs, "FILE", "a text file");
  flags.AddInt("size", &size, "N", "number of pieces");
  flags.AddString("out", &out_prefix, "PREFIX", "output prefix");
  std::vector<std::string> positional;
  if (absl::optional<int> exit_code = flags.ParseCommand(args, &positional, out, err)) {
    return *exit_code;
  }
  if (positional.size() != 1 || positional[0] != "train" || inputs.empty() || size <= 0 || out_prefix.empty()) {
    err << "error: want: trainyard vocab train --input FILE... --size N --out PREFIX\n";
    return kExitUsage;
  }
  absl::Status status = TrainVocabulary(inputs, size, out_prefix);
  if (!status.ok()) {
    err << "error: " << status.message() << "\n";
    return status.code() == absl::StatusCode::kInternal ? kExitFailed : kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<Vocabulary>> vocab = Vocabulary::Load(out_prefix + ".model");
  if (!vocab.ok()) {
    err << "error: " << vocab.status().message() << "\n";
    return kExitFailed;
  }
  out << "wrote " << out_prefix << ".model (" << (*vocab)->size() << " pieces; model vocab_size "
      << (*vocab)->padded_size() << ")\n";
  return kExitOk;
}

}  // namespace trainyard

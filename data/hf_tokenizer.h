// A SentencePiece vocabulary as Hugging Face's T5 tokenizer files, both
// ways, so that a vocabulary travels with the model through `trainyard
// convert`:
//
//   spiece.model             the SentencePiece model (T5Tokenizer's)
//   tokenizer.json           the fast tokenizer transformers' T5 converter
//                            makes from it (a Unigram model over the pieces
//                            and scores, the model's precompiled
//                            normaliser, Metaspace, "$A </s>"), so that
//                            AutoTokenizer loads it without converting
//   tokenizer_config.json    T5Tokenizer, its special tokens, extra_ids
//   special_tokens_map.json
//
// Sentinels are HF's and ours alike: <extra_id_0> is the last id.
//
// Thread-safety: free functions on files.
#ifndef TRAINYARD_DATA_HF_TOKENIZER_H_
#define TRAINYARD_DATA_HF_TOKENIZER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

struct HfTokenizer {
  std::string spiece;  // the SentencePiece model; empty: the directory has none
  int extra_ids = 0;
};

// The tokenizer of the Hugging Face T5 directory `dir`, as T5Tokenizer
// reads it: `vocabulary` when given, else dir/spiece.model (none: an empty
// result); its extra ids are tokenizer_config.json's "extra_ids" (or the
// <extra_id_N> among its additional_special_tokens), else T5Tokenizer's
// default, 100, when the model's `vocab_size` holds them, else 0. The
// vocabulary is loaded to check it: kNotFound or kInvalidArgument naming
// the file; kInvalidArgument when its ids (pieces and extra ids) are more
// than vocab_size, naming both numbers.
absl::StatusOr<HfTokenizer> ReadHfTokenizer(const std::string& dir, const std::string& vocabulary, int vocab_size);

// Writes the four files above into `dir` (which exists) for the
// SentencePiece model `spiece` with `extra_ids` sentinels. kInvalidArgument
// naming the file for a model that is not a T5 unigram SentencePiece model.
absl::Status WriteHfTokenizer(const std::string& spiece, int extra_ids, const std::string& dir);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_HF_TOKENIZER_H_

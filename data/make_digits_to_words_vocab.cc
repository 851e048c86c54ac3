// Makes the bundled task's vocabulary (data/vocab/digits_to_words.model) from
// its own training split: every 8th training example's inputs and targets,
// one per line, into a 128-piece unigram SentencePiece model with T5's special
// ids. Deterministic: the same pieces and scores on every run (the model
// file also records the path of its temporary input).
//
// usage: make_digits_to_words_vocab OUT_PREFIX
#include <unistd.h>
#include <cstdio>
#include <fstream>

#include "data/source.h"
#include "data/vocabulary.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_PREFIX\n", argv[0]);
    return 2;
  }
  auto source = trainyard::DigitsToWordsSource("train");
  if (!source.ok()) return 1;
  const std::string text = std::string("/tmp/digits_to_words_text.") + std::to_string(getpid());
  {
    std::ofstream out(text);
    // Every 8th example (~100k): below SentencePiece's sampling threshold, so
    // training reads every line and is deterministic.
    for (int64_t i = 0; i < (*source)->size(); i += 8) {
      const trainyard::Example ex = *(*source)->Get(i);
      out << ex.at("inputs") << "\n" << ex.at("targets") << "\n";
    }
  }
  absl::Status status = trainyard::TrainVocabulary({text}, 128, argv[1]);
  std::remove(text.c_str());
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

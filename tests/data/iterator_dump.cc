// Prints one line per batch of the bundled task's iterator (rank 1 of 2,
// packed, shuffled): a hash of every feature, and the iterator's state
// before the batch. With --restore STATE the iterator first returns to a
// state printed by an earlier process.
//
// usage: iterator_dump VOCAB BATCHES [--restore "EPOCH POSITION"]
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "data/iterator.h"

namespace {

template <typename T>
uint64_t Hash(const std::vector<T>& v, uint64_t h) {
  for (const T& x : v) h = h * 1099511628211ull ^ std::hash<T>()(x);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainyard;
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: %s VOCAB BATCHES [--restore STATE]\n", argv[0]);
    return 2;
  }
  TaskRegistry registry;
  if (!RegisterDigitsToWords(argv[1], &registry).ok()) return 1;
  IteratorOptions options;
  options.rows = 4;
  options.inputs_length = 16;
  options.targets_length = 32;
  options.split = "validation";
  options.seed = 17;
  options.rank = 1;
  options.world_size = 2;
  auto it = TaskIterator::Create(**registry.Get("digits_to_words"), options);
  if (!it.ok()) return 1;
  if (argc == 5 && !(*it)->Restore(argv[4]).ok()) return 1;
  for (int i = 0; i < std::atoi(argv[2]); ++i) {
    const std::string state = (*it)->State();
    absl::StatusOr<ConvertedBatch> b = (*it)->Next();
    if (!b.ok()) return 1;
    uint64_t h = 14695981039346656037ull;
    h = Hash(b->encoder_input_tokens, h);
    h = Hash(b->decoder_input_tokens, h);
    h = Hash(b->decoder_target_tokens, h);
    h = Hash(b->decoder_loss_weights, h);
    h = Hash(b->encoder_segment_ids, h);
    h = Hash(b->decoder_segment_ids, h);
    std::printf("%s\t%016llx\n", state.c_str(), static_cast<unsigned long long>(h));
  }
  return 0;
}

// N of the bundled task's train examples as the model sees them (tokenised,
// EOS appended), one JSON line each: {"inputs": [ids], "targets": [ids]},
// drawn uniformly from the whole split (a seeded shuffle), as Trainyard's
// shuffled training stream draws them. The data-parallel peer
// (bench/peer/ddp_peer.py) trains on these, so that both systems see the
// same distribution of lengths.
//
// usage: peer_examples N > examples.jsonl
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>

#include "data/bundled.h"
#include "data/task.h"

int main(int argc, char** argv) {
  using namespace trainyard;
  if (argc != 2 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: %s N\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]);
  TaskRegistry registry;
  if (absl::Status s = RegisterBundledTasks(&registry); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const Task& task = **registry.Get("digits_to_words");
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = task.source("train");
  if (!source.ok()) return 1;
  std::vector<int64_t> order((*source)->size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(order.size()); ++i) {
    absl::StatusOr<Example> ex = (*source)->Get(order[i]);
    if (!ex.ok()) return 1;
    absl::StatusOr<TokenizedExample> t = Tokenize(task, *ex);
    if (!t.ok()) {
      std::fprintf(stderr, "error: example %lld: %s\n", static_cast<long long>(i),
                   std::string(t.status().message()).c_str());
      return 1;
    }
    std::string line = "{\"inputs\": [";
    for (size_t k = 0; k < t->inputs.size(); ++k) line += (k ? ", " : "") + std::to_string(t->inputs[k]);
    line += "], \"targets\": [";
    for (size_t k = 0; k < t->targets.size(); ++k) line += (k ? ", " : "") + std::to_string(t->targets[k]);
    line += "]}\n";
    std::fputs(line.c_str(), stdout);
  }
  return 0;
}

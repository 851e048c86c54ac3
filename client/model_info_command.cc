// `trainyard model-info`: a preset's architecture and exact parameter count,
// computed in closed form (no weights are allocated, so t5_1_1_xxl answers
// instantly).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/flags.h"
#include "nlohmann/json.hpp"
#include "spec/presets.h"

namespace trainyard {
namespace {

nlohmann::ordered_json ToJson(const std::string& preset, const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["preset"] = preset;
  j["num_params"] = CountParameters(c);
  j["vocab_size"] = c.vocab_size();
  j["d_model"] = c.d_model();
  j["num_heads"] = c.num_heads();
  j["d_kv"] = c.d_kv();
  j["d_ff"] = c.d_ff();
  j["num_encoder_layers"] = c.num_encoder_layers();
  j["num_decoder_layers"] = c.num_decoder_layers();
  j["feed_forward"] = ModelConfig::FeedForward_Name(c.feed_forward());
  j["tie_embeddings"] = c.tie_embeddings();
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets();
  j["relative_attention_max_distance"] = c.relative_attention_max_distance();
  j["dropout_rate"] = c.dropout_rate();
  return j;
}

std::string WithThousands(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

int RunModelInfo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string preset;
  bool json = false;
  FlagSet flags("model-info [--preset NAME] [--json]",
                "Prints a model preset's architecture and exact parameter count (without\n"
                "allocating weights). Without --preset, lists every preset.");
  flags.AddString("preset", &preset, "NAME", "the preset to describe");
  flags.AddBool("json", &json, "print JSON (one object, or an array of all presets)");
  std::vector<std::string> positional;
  if (absl::optional<int> exit_code = flags.ParseCommand(args, &positional, out, err)) {
    return *exit_code;
  }
  if (!positional.empty()) {
    err << "error: unexpected argument \"" << positional[0] << "\"\n";
    return kExitUsage;
  }
  std::vector<std::string> names = preset.empty() ? PresetNames() : std::vector<std::string>{preset};
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (!json) {
    out << absl::StrFormat("%-14s %15s %8s %6s %5s %6s %4s %4s %7s %s\n", "preset", "params", "d_model", "heads",
                           "d_kv", "d_ff", "enc", "dec", "vocab", "ffn");
  }
  for (const std::string& name : names) {
    absl::StatusOr<ModelConfig> config = PresetConfig(name);
    if (!config.ok()) {
      err << "error: --preset: " << config.status().message() << "\n";
      return kExitUsage;
    }
    if (json) {
      all.push_back(ToJson(name, *config));
      continue;
    }
    out << absl::StrFormat("%-14s %15s %8d %6d %5d %6d %4d %4d %7d %s\n", name, WithThousands(CountParameters(*config)),
                           config->d_model(), config->num_heads(), config->d_kv(), config->d_ff(),
                           config->num_encoder_layers(), config->num_decoder_layers(), config->vocab_size(),
                           ModelConfig::FeedForward_Name(config->feed_forward()));
  }
  if (json) out << (preset.empty() ? all.dump(2) : all[0].dump(2)) << "\n";
  return kExitOk;
}

}  // namespace trainyard

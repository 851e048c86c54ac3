#include "data/hf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "data/vocabulary.h"
#include "nlohmann/json.hpp"

namespace trainyard {
namespace {

constexpr int kDefaultExtraIds = 100;  // T5Tokenizer's

absl::StatusOr<std::string> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The fields of a serialized protocol buffer message, in order (the wire
// format only: SentencePiece's model is a ModelProto, read here without its
// schema or its library).
struct WireField {
  int number = 0;
  int type = 0;             // 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit
  uint64_t varint = 0;      // type 0
  absl::string_view bytes;  // types 1, 2, 5
};

class WireReader {
 public:
  explicit WireReader(absl::string_view data) : data_(data) {}
  // False at the end; kInvalidArgument-worthy input sets `bad`.
  bool Next(WireField* field) {
    if (bad_ || pos_ >= data_.size()) return false;
    uint64_t key;
    if (!Varint(&key)) return Fail();
    field->number = static_cast<int>(key >> 3);
    field->type = static_cast<int>(key & 7);
    switch (field->type) {
      case 0:
        return Varint(&field->varint) || Fail();
      case 1:
        return Take(8, &field->bytes) || Fail();
      case 2: {
        uint64_t n;
        return (Varint(&n) && Take(n, &field->bytes)) || Fail();
      }
      case 5:
        return Take(4, &field->bytes) || Fail();
      default:
        return Fail();
    }
  }
  bool bad() const { return bad_; }

 private:
  bool Varint(uint64_t* out) {
    *out = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
      *out |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return true;
    }
    return false;
  }
  bool Take(uint64_t n, absl::string_view* out) {
    if (n > data_.size() - pos_) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Fail() {
    bad_ = true;
    return false;
  }

  absl::string_view data_;
  size_t pos_ = 0;
  bool bad_ = false;
};

struct Piece {
  std::string text;
  float score = 0;
};

// What transformers' T5 converter takes from a ModelProto: its pieces
// (field 1: piece 1, score 2), its model type (trainer_spec 2, model_type
// 3: 1 is unigram, the default) and its normaliser's precompiled charsmap
// (normalizer_spec 3, field 2).
struct SpmContents {
  std::vector<Piece> pieces;
  int model_type = 1;
  std::string precompiled_charsmap;
};

absl::StatusOr<SpmContents> ParseSpm(const std::string& path, const std::string& bytes) {
  const absl::Status bad =
      absl::InvalidArgumentError(absl::StrCat(path, ": not a SentencePiece model (a ModelProto that does not parse)"));
  SpmContents out;
  WireReader model(bytes);
  WireField f;
  while (model.Next(&f)) {
    if (f.number == 1 && f.type == 2) {
      Piece piece;
      WireReader inner(f.bytes);
      WireField g;
      while (inner.Next(&g)) {
        if (g.number == 1 && g.type == 2) piece.text = std::string(g.bytes);
        if (g.number == 2 && g.type == 5) std::memcpy(&piece.score, g.bytes.data(), sizeof(float));
      }
      if (inner.bad()) return bad;
      out.pieces.push_back(std::move(piece));
    } else if ((f.number == 2 || f.number == 3) && f.type == 2) {
      WireReader inner(f.bytes);
      WireField g;
      while (inner.Next(&g)) {
        if (f.number == 2 && g.number == 3 && g.type == 0) out.model_type = static_cast<int>(g.varint);
        if (f.number == 3 && g.number == 2 && g.type == 2) out.precompiled_charsmap = std::string(g.bytes);
      }
      if (inner.bad()) return bad;
    }
  }
  if (model.bad() || out.pieces.size() < 3) return bad;
  return out;
}

std::vector<std::string> ExtraIdTokens(int extra_ids) {
  std::vector<std::string> tokens;
  for (int n = 0; n < extra_ids; ++n) tokens.push_back(absl::StrCat("<extra_id_", n, ">"));
  return tokens;
}

// tokenizer.json as the tokenizers library (0.15) writes what transformers'
// T5Converter builds.
nlohmann::ordered_json FastTokenizer(const SpmContents& spm, int extra_ids) {
  const int pieces = static_cast<int>(spm.pieces.size());
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  auto special = [&](int id, const std::string& content) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  };
  for (int id : {Vocabulary::kPadId, Vocabulary::kEosId, Vocabulary::kUnkId}) special(id, spm.pieces[id].text);
  nlohmann::ordered_json vocab = nlohmann::ordered_json::array();
  for (const Piece& p : spm.pieces) vocab.push_back({p.text, static_cast<double>(p.score)});
  for (int n = extra_ids - 1; n >= 0; --n) vocab.push_back({absl::StrCat("<extra_id_", n, ">"), 0.0});
  for (int n = 0; n < extra_ids; ++n) special(pieces + extra_ids - 1 - n, absl::StrCat("<extra_id_", n, ">"));
  std::sort(added.begin(), added.end(), [](const auto& a, const auto& b) { return a["id"] < b["id"]; });
  nlohmann::ordered_json normalizers = nlohmann::ordered_json::array();
  if (!spm.precompiled_charsmap.empty()) {
    normalizers.push_back(
        {{"type", "Precompiled"}, {"precompiled_charsmap", absl::Base64Escape(spm.precompiled_charsmap)}});
  }
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}});
  const nlohmann::ordered_json metaspace = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}, {"prepend_scheme", "always"}};
  const std::string eos = spm.pieces[Vocabulary::kEosId].text;
  auto sequence = [](const char* id) { return nlohmann::ordered_json{{"Sequence", {{"id", id}, {"type_id", 0}}}}; };
  const nlohmann::ordered_json eos_token = {{"SpecialToken", {{"id", eos}, {"type_id", 0}}}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
      {"pre_tokenizer", metaspace},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {sequence("A"), eos_token}},
        {"pair", {sequence("A"), eos_token, sequence("B"), eos_token}},
        {"special_tokens", {{eos, {{"id", eos}, {"ids", {Vocabulary::kEosId}}, {"tokens", {eos}}}}}}}},
      {"decoder", metaspace},
      {"model", {{"type", "Unigram"}, {"unk_id", Vocabulary::kUnkId}, {"vocab", vocab}, {"byte_fallback", false}}},
  };
}

}  // namespace

absl::StatusOr<HfTokenizer> ReadHfTokenizer(const std::string& dir, const std::string& vocabulary, int vocab_size) {
  HfTokenizer out;
  out.spiece = vocabulary;
  if (out.spiece.empty()) {
    const std::string own = dir + "/spiece.model";
    if (!std::ifstream(own).good()) return out;
    out.spiece = own;
  }
  std::optional<int> extra_ids;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::ifstream(config_path).good()) {
    TY_ASSIGN_OR_RETURN(std::string text, ReadBytes(config_path));
    try {
      const nlohmann::json config = nlohmann::json::parse(text);
      if (config.contains("extra_ids")) {
        extra_ids = config["extra_ids"].get<int>();
      } else if (config.contains("additional_special_tokens")) {
        int n = 0;
        for (const auto& token : config["additional_special_tokens"]) {
          const std::string content = token.is_string() ? token.get<std::string>() : token.value("content", "");
          n += absl::StartsWith(content, "<extra_id_");
        }
        if (n > 0) extra_ids = n;
      }
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", e.what()));
    }
    if (extra_ids && *extra_ids < 0) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": extra_ids ", *extra_ids, "; must be >= 0"));
    }
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Vocabulary> pieces, Vocabulary::Load(out.spiece));
  out.extra_ids = extra_ids ? *extra_ids : pieces->size() + kDefaultExtraIds <= vocab_size ? kDefaultExtraIds : 0;
  if (pieces->size() + out.extra_ids > vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(out.spiece, ": ", pieces->size(), " pieces and ", out.extra_ids,
                                                   " extra ids (", config_path, ") are more ids than the model's ",
                                                   vocab_size, " embeddings (config.json's vocab_size)"));
  }
  return out;
}

absl::Status WriteHfTokenizer(const std::string& spiece, int extra_ids, const std::string& dir) {
  if (extra_ids < 0) return absl::InvalidArgumentError(absl::StrCat("extra_ids ", extra_ids, "; must be >= 0"));
  TY_RETURN_IF_ERROR(Vocabulary::Load(spiece).status());  // T5's special ids
  TY_ASSIGN_OR_RETURN(std::string bytes, ReadBytes(spiece));
  TY_ASSIGN_OR_RETURN(SpmContents spm, ParseSpm(spiece, bytes));
  if (spm.model_type != 1) {
    return absl::InvalidArgumentError(absl::StrCat(spiece, ": a SentencePiece model of type ", spm.model_type,
                                                   "; T5's tokenizer files need a unigram model (type 1)"));
  }
  const std::string pad = spm.pieces[Vocabulary::kPadId].text, eos = spm.pieces[Vocabulary::kEosId].text,
                    unk = spm.pieces[Vocabulary::kUnkId].text;
  const std::vector<std::string> sentinels = ExtraIdTokens(extra_ids);
  const nlohmann::ordered_json config = {
      {"tokenizer_class", "T5Tokenizer"},
      {"eos_token", eos},
      {"unk_token", unk},
      {"pad_token", pad},
      {"extra_ids", extra_ids},
      {"additional_special_tokens", sentinels},
      // Our tokenisation is SentencePiece's own, which T5Tokenizer calls
      // legacy.
      {"legacy", true},
      {"sp_model_kwargs", nlohmann::ordered_json::object()},
  };
  const nlohmann::ordered_json special_tokens = {
      {"eos_token", eos}, {"unk_token", unk}, {"pad_token", pad}, {"additional_special_tokens", sentinels}};
  std::string fast;
  try {
    fast = FastTokenizer(spm, extra_ids).dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(spiece, ": a piece is not UTF-8: ", e.what()));
  }
  TY_RETURN_IF_ERROR(WriteFileAtomically(dir + "/spiece.model", bytes));
  TY_RETURN_IF_ERROR(WriteFileAtomically(dir + "/tokenizer.json", fast));
  TY_RETURN_IF_ERROR(WriteFileAtomically(dir + "/tokenizer_config.json", config.dump(2) + "\n"));
  return WriteFileAtomically(dir + "/special_tokens_map.json", special_tokens.dump(2) + "\n");
}

}  // namespace trainyard

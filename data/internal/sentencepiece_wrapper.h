// A firewall around SentencePiece. Debian's libsentencepiece.so carries its
// own copy of protobuf-lite and exports its symbols; linked into a process
// with libprotobuf, libprotobuf's initialisers bind to those copies and crash.
// Its header also defines `absl::string_view` as std::string_view, which
// collides with Abseil. So SentencePiece lives in a small shim library,
// libtrainyard_spm.so, that LoadSpmApi opens with RTLD_LOCAL (its symbols
// stay out of the process's global scope) and, where the sanitizers allow
// it, RTLD_DEEPBIND (it binds to its own copies first). This header uses std
// types only; data/vocabulary.h builds the Status API on top.
#ifndef TRAINYARD_DATA_INTERNAL_SENTENCEPIECE_WRAPPER_H_
#define TRAINYARD_DATA_INTERNAL_SENTENCEPIECE_WRAPPER_H_

#include <memory>
#include <string>
#include <vector>

namespace trainyard {
namespace internal {

class SpmModel {
 public:
  virtual ~SpmModel() = default;
  virtual bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const = 0;
  virtual bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const = 0;
  virtual int PieceSize() const = 0;
  virtual int pad_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
};

// The shim's entry points.
struct SpmApi {
  // nullptr and *error on failure.
  SpmModel* (*load)(const std::string& path, std::string* error);
  // sentencepiece_trainer's flags, e.g. "--input=a.txt --model_prefix=m ...".
  bool (*train)(const std::string& args, std::string* error);
};

// Opens the shim once (thread-safe) and returns its API, or nullptr with
// *error naming every place it looked. The shim is found through
// TRAINYARD_SPM_SHIM, next to the executable, in ../data/ beside it, or in
// the executable's Bazel runfiles.
const SpmApi* LoadSpmApi(std::string* error);

}  // namespace internal
}  // namespace trainyard

#endif  // TRAINYARD_DATA_INTERNAL_SENTENCEPIECE_WRAPPER_H_

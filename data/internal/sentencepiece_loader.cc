#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "data/internal/sentencepiece_wrapper.h"

namespace trainyard {
namespace internal {
namespace {

constexpr char kShim[] = "libtrainyard_spm.so";

// The sanitizers' runtimes refuse RTLD_DEEPBIND. gcc says it is
// sanitizing with __SANITIZE_*__; clang 14 only through __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TRAINYARD_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TRAINYARD_SANITIZED 1
#endif

#if defined(TRAINYARD_SANITIZED)
constexpr int kDeepBind = 0;
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("TRAINYARD_SPM_SHIM")) out.push_back(env);
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    const std::string exe(self, static_cast<size_t>(n));
    const std::string dir = exe.substr(0, exe.rfind('/'));
    out.push_back(dir + "/" + kShim);
    out.push_back(dir + "/../data/" + kShim);
    out.push_back(exe + ".runfiles/trainyard/data/" + kShim);
    out.push_back(dir + "/trainyard.runfiles/trainyard/data/" + kShim);  // trainyard-torch beside trainyard
  }
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* env = std::getenv(var)) out.push_back(std::string(env) + "/trainyard/data/" + kShim);
  }
  return out;
}

}  // namespace

const SpmApi* LoadSpmApi(std::string* error) {
  static std::once_flag once;
  static const SpmApi* api = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
#if defined(TRAINYARD_SANITIZED)
    // Without RTLD_DEEPBIND the shim's SentencePiece binds to a libprotobuf
    // already in the process, whose version check aborts it: refuse instead.
    if (dlsym(RTLD_DEFAULT, "_ZN6google8protobuf8internal13VerifyVersionEiiPKc") != nullptr) {
      load_error = std::string("cannot load the SentencePiece shim ") + kShim +
                   " in a sanitized build of a process that links libprotobuf (the sanitizers refuse "
                   "RTLD_DEEPBIND, which keeps the shim's own copy apart)";
      return;
    }
#endif
    std::string tried;
    for (const std::string& path : Candidates()) {
      if (access(path.c_str(), R_OK) != 0) {
        tried += "\n  " + path + ": not found";
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kDeepBind);
      if (handle == nullptr) {
        tried += "\n  " + path + ": " + dlerror();
        continue;
      }
      auto entry = reinterpret_cast<const SpmApi* (*)()>(dlsym(handle, "TrainyardSpmApi"));
      if (entry == nullptr) {
        tried += "\n  " + path + ": no TrainyardSpmApi";
        continue;
      }
      api = entry();
      return;
    }
    load_error = std::string("cannot load the SentencePiece shim ") + kShim + " (set TRAINYARD_SPM_SHIM):" + tried;
  });
  if (api == nullptr) *error = load_error;
  return api;
}

}  // namespace internal
}  // namespace trainyard

// Writes a member guarded by a mutex without holding it. Every build
// compiles with clang's -Werror=thread-safety (.bazelrc), so this must not
// compile; scripts/test.sh checks that it fails with that diagnostic.
#include "common/mutex.h"

namespace trainyard {

class Counter {
 public:
  void Increment() { ++count_; }  // no lock: the error this file exists for

 private:
  Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

void Touch(Counter& counter) { counter.Increment(); }

}  // namespace trainyard

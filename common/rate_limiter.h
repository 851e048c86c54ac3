// Per-key token buckets: each key (a client) may do `rate` operations per
// second on average and `burst` at once. Thread-safe.
#ifndef TRAINYARD_COMMON_RATE_LIMITER_H_
#define TRAINYARD_COMMON_RATE_LIMITER_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace trainyard {

class RateLimiter {
 public:
  // rate <= 0: unlimited. `clock` is not owned (nullptr: the real clock).
  RateLimiter(double rate, double burst, Clock* clock = nullptr);

  // Takes one token from `key`'s bucket; false (and *retry_after, if given,
  // set to when one will be there) when it is empty.
  bool Allow(const std::string& key, absl::Duration* retry_after = nullptr);

  double rate() const { return rate_; }

 private:
  struct Bucket {
    double tokens;
    absl::Time updated;
  };
  const double rate_, burst_;
  Clock* clock_;
  Mutex mu_;
  std::map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_RATE_LIMITER_H_

#include "common/rate_limiter.h"

#include <algorithm>

namespace trainyard {

RateLimiter::RateLimiter(double rate, double burst, Clock* clock)
    : rate_(rate), burst_(std::max(burst, 1.0)), clock_(clock != nullptr ? clock : Clock::Real()) {}

bool RateLimiter::Allow(const std::string& key, absl::Duration* retry_after) {
  if (rate_ <= 0) return true;
  const absl::Time now = clock_->Now();
  MutexLock lock(&mu_);
  // Full buckets carry no information: dropping them bounds the map by the
  // clients active in the last burst / rate seconds.
  if (buckets_.size() > 4096) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      const double refilled = it->second.tokens + absl::ToDoubleSeconds(now - it->second.updated) * rate_;
      it = refilled >= burst_ ? buckets_.erase(it) : std::next(it);
    }
  }
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{burst_, now});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens = std::min(burst_, b.tokens + absl::ToDoubleSeconds(now - b.updated) * rate_);
    b.updated = now;
  }
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return true;
  }
  if (retry_after != nullptr) *retry_after = absl::Seconds((1.0 - b.tokens) / rate_);
  return false;
}

}  // namespace trainyard

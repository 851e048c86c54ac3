// BackgroundThreads: work that must finish but that nobody waits for at
// once (tearing a job down, closing a group's connections, telling a
// session's workers to let go), each on a thread of its own. A thread that
// has finished is joined by the next Start or Reap, so a long-lived process
// holds at most the threads still running plus the ones that ended since
// the last call, not one per task it ever started. The destructor (or
// JoinAll) waits for every thread.
//
// Thread-safety: thread-safe. A task may Start or Reap others on the
// BackgroundThreads that runs it, never JoinAll (it would wait for itself).
#ifndef TRAINYARD_COMMON_BACKGROUND_THREADS_H_
#define TRAINYARD_COMMON_BACKGROUND_THREADS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace trainyard {

class BackgroundThreads {
 public:
  BackgroundThreads() = default;
  ~BackgroundThreads() { JoinAll(); }
  BackgroundThreads(const BackgroundThreads&) = delete;
  BackgroundThreads& operator=(const BackgroundThreads&) = delete;

  // Runs `task` on a new thread, after joining the threads that have ended.
  void Start(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the threads that have ended; returns how many it joined.
  size_t Reap() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for every thread started so far.
  void JoinAll() ABSL_LOCKS_EXCLUDED(mu_);

  // Threads started and not yet joined (running, or ended and not reaped).
  size_t held() const ABSL_LOCKS_EXCLUDED(mu_);
  // Threads whose task has not returned yet.
  size_t running() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Takes the threads that have ended out of threads_ (caller joins them
  // outside mu_).
  std::vector<std::thread> TakeEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> ended_ ABSL_GUARDED_BY(mu_);  // ids whose task returned, not yet joined
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_BACKGROUND_THREADS_H_

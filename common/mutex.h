// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// clang's thread-safety annotations (ABSL_GUARDED_BY and friends work with
// them), the way LevelDB's port::Mutex wraps its platform mutex.
//
// Why not absl::Mutex: the system's Abseil is built without ThreadSanitizer,
// so TSan cannot see absl::Mutex's synchronisation and reports every access
// it guards as a race; TSan does see pthread mutexes, which std::mutex is.
//
// Thread-safety: as std::mutex.
#ifndef TRAINYARD_COMMON_MUTEX_H_
#define TRAINYARD_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace trainyard {

class CondVar;

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis this thread holds the mutex (in a lambda or callback
  // that runs under it); checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Releases `mu` while it waits; holds it again on return. Wakes spuriously
  // too: callers loop on their condition.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, until `deadline` at the latest; true if it returned because
  // the deadline passed.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_MUTEX_H_

#include "common/background_threads.h"

#include <utility>

namespace trainyard {

std::vector<std::thread> BackgroundThreads::TakeEnded() {
  std::vector<std::thread> ended;
  for (auto id = ended_.begin(); id != ended_.end();) {
    auto it = threads_.find(*id);
    if (it == threads_.end()) {  // JoinAll holds it and will join it
      ++id;
      continue;
    }
    ended.push_back(std::move(it->second));
    threads_.erase(it);
    id = ended_.erase(id);
  }
  return ended;
}

void BackgroundThreads::Start(std::function<void()> task) {
  std::vector<std::thread> ended;
  {
    MutexLock lock(&mu_);
    ended = TakeEnded();
    const uint64_t id = next_id_++;
    // The thread records its end under mu_; it cannot do so before it is
    // in threads_, since mu_ is held until then.
    threads_.emplace(id, std::thread([this, id, task = std::move(task)]() mutable {
                       task();
                       task = nullptr;  // what it holds goes before it counts as ended
                       MutexLock lock(&mu_);
                       ended_.insert(id);
                     }));
  }
  for (std::thread& t : ended) t.join();
}

size_t BackgroundThreads::Reap() {
  std::vector<std::thread> ended;
  {
    MutexLock lock(&mu_);
    ended = TakeEnded();
  }
  for (std::thread& t : ended) t.join();
  return ended.size();
}

void BackgroundThreads::JoinAll() {
  // Tasks may start others (a teardown that closes connections in turn):
  // loop until none is left.
  while (true) {
    std::map<uint64_t, std::thread> all;
    {
      MutexLock lock(&mu_);
      if (threads_.empty()) return;
      all.swap(threads_);
    }
    for (auto& [id, t] : all) t.join();
    MutexLock lock(&mu_);
    for (const auto& [id, t] : all) ended_.erase(id);
  }
}

size_t BackgroundThreads::held() const {
  MutexLock lock(&mu_);
  return threads_.size();
}

size_t BackgroundThreads::running() const {
  MutexLock lock(&mu_);
  size_t running = 0;
  for (const auto& [id, t] : threads_) running += ended_.count(id) == 0 ? 1 : 0;
  return running;
}

}  // namespace trainyard

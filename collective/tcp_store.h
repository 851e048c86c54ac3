// A Store over c10d's TCPStore: rendezvous without a coordinator, for
// programs that start their ranks themselves (benchmarks, tests). Rank 0
// hosts the server (port 0: chosen by the OS; port() tells which); the
// others connect to it.
#ifndef TRAINYARD_COLLECTIVE_TCP_STORE_H_
#define TRAINYARD_COLLECTIVE_TCP_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collective/store.h"

namespace trainyard {

class TcpStore : public Store {
 public:
  // `is_server`: host the store on host:port (port 0 = any) for
  // `num_workers` processes; otherwise connect to it. kUnavailable if it
  // cannot listen or connect within `timeout`.
  static absl::StatusOr<std::unique_ptr<TcpStore>> Create(const std::string& host, uint16_t port, bool is_server,
                                                          int num_workers, absl::Duration timeout);
  ~TcpStore() override;
  uint16_t port() const;

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;

 private:
  TcpStore() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_TCP_STORE_H_
